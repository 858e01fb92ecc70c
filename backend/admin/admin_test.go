package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"vendorgate/backend/audit"
	"vendorgate/backend/respond"
	"vendorgate/backend/store/sqlite"
	"vendorgate/backend/vendors"
	"vendorgate/shared/apierr"
	"vendorgate/shared/apikey"
)

const testToken = "admin-token-0123456789"

// server is the admin API as the backend serves it: a real SQLite store,
// the real vendor service, on a loopback listener with the admin
// listener's body limit and header check.
type server struct {
	url   string
	close func() error // closes the store
}

func start(t *testing.T) *server {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "vg.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	signer, err := apikey.NewSigner([]string{"admin-test-key-signing-secret-0123456789"})
	if err != nil {
		t.Fatal(err)
	}
	vs, err := vendors.New(vendors.Options{Store: st, Prefixes: apikey.DefaultPrefixes(), Signer: signer, KeyLifetime: 90 * 24 * time.Hour, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	al, err := audit.New(st, time.Now, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	api, err := New(Options{Tokens: []Token{{Name: "admin", Token: testToken}}, Audit: al, Vendors: vs, DB: st, Logger: log,
		Metrics: func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("metrics_here 1\n") }})
	if err != nil {
		t.Fatal(err)
	}
	r := respond.NewRouter(log)
	api.Register(r)
	srv := &fasthttp.Server{Handler: r.Handler, MaxRequestBodySize: 64 << 20,
		HeaderReceived: api.HeaderReceived, ErrorHandler: api.ServerError}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = srv.Serve(ln); close(done) }()
	t.Cleanup(func() { _ = srv.Shutdown(); <-done })
	return &server{url: "http://" + ln.Addr().String(), close: st.Close}
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(a.body, v); err != nil {
		t.Fatalf("%d %s: %v", a.status, a.body, err)
	}
}

func (a answer) wantError(t *testing.T, status int, code apierr.Code) {
	t.Helper()
	d, ok := apierr.Parse(a.body)
	if a.status != status || !ok || d.Code != code {
		t.Fatalf("got %d %s, want %d %s", a.status, a.body, status, code)
	}
}

func (s *server) do(t *testing.T, method, path, token, body string) answer {
	t.Helper()
	req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, body: b}
}

// Every operator route wants the token: without it, or with another, 401
// with the envelope and a Bearer challenge; the SRE endpoints stay open.
func TestTokenGuardsOperatorRoutes(t *testing.T) {
	s := start(t)
	for _, rt := range []struct{ method, path string }{
		{"GET", "/admin/v1/vendors"}, {"POST", "/admin/v1/vendors"}, {"GET", "/admin/v1/vendors/x"},
		{"POST", "/admin/v1/vendors/x/approve"}, {"PUT", "/admin/v1/vendors/x/services"},
		{"POST", "/admin/v1/vendors/x/keys"}, {"POST", "/admin/v1/keys/x/revoke"},
	} {
		for _, tok := range []string{"", "wrong-token-0123456789"} {
			a := s.do(t, rt.method, rt.path, tok, "")
			a.wantError(t, 401, apierr.InvalidAPIKey)
			if !strings.HasPrefix(a.header.Get("WWW-Authenticate"), "Bearer ") {
				t.Fatalf("%s %s: no Bearer challenge", rt.method, rt.path)
			}
		}
	}
	if a := s.do(t, "GET", "/healthz", "", ""); a.status != 200 || !strings.Contains(string(a.body), `"ok"`) {
		t.Fatalf("/healthz %d %s", a.status, a.body)
	}
	if a := s.do(t, "GET", "/metrics", "", ""); a.status != 200 || string(a.body) != "metrics_here 1\n" {
		t.Fatalf("/metrics %d %s", a.status, a.body)
	}
	// Order routes exist only with an order service.
	s.do(t, "GET", "/admin/v1/orders/x", testToken, "").wantError(t, 404, apierr.NotFound)
}

// A vendor's life through the API: created pending, approved (twice is
// the same), a forbidden transition a 409, services set, a key issued
// (shown once), listed without its secret, revoked.
func TestVendorAndKeyLifecycle(t *testing.T) {
	s := start(t)
	a := s.do(t, "POST", "/admin/v1/vendors", testToken, `{"company_name":"Acme Freight","environment":"sandbox","enabled_services":["mvr"]}`)
	var v Vendor
	a.decode(t, &v)
	if a.status != 201 || v.Status != "pending" || v.CompanyName != "Acme Freight" || v.VendorID == "" {
		t.Fatalf("create: %d %s", a.status, a.body)
	}
	s.do(t, "POST", "/admin/v1/vendors", testToken, `{"company_name":"","environment":"moon"}`).wantError(t, 400, apierr.ValidationError)

	vp := "/admin/v1/vendors/" + v.VendorID
	s.do(t, "POST", vp+"/reinstate", testToken, "").wantError(t, 409, apierr.RequestFailed)
	for i := 0; i < 2; i++ {
		a = s.do(t, "POST", vp+"/approve", testToken, "")
		a.decode(t, &v)
		if a.status != 200 || v.Status != "approved" {
			t.Fatalf("approve %d: %d %s", i, a.status, a.body)
		}
	}
	a = s.do(t, "PUT", vp+"/services", testToken, `{"enabled_services":["mvr","psp"]}`)
	a.decode(t, &v)
	if a.status != 200 || strings.Join(v.EnabledServices, ",") != "mvr,psp" {
		t.Fatalf("services: %d %s", a.status, a.body)
	}
	s.do(t, "GET", "/admin/v1/vendors/0b9a7f0e-1111-4222-8333-444455556666", testToken, "").wantError(t, 404, apierr.NotFound)

	var list struct{ Vendors []Vendor }
	s.do(t, "GET", "/admin/v1/vendors", testToken, "").decode(t, &list)
	if len(list.Vendors) != 1 || list.Vendors[0].VendorID != v.VendorID {
		t.Fatalf("list: %+v", list)
	}

	s.do(t, "POST", vp+"/keys", testToken, `{"lifetime_seconds":-5}`).wantError(t, 400, apierr.ValidationError)
	a = s.do(t, "POST", vp+"/keys", testToken, `{"lifetime_seconds":3600}`)
	var issued IssuedKey
	a.decode(t, &issued)
	if a.status != 201 || issued.Key == "" || issued.ExpiresAt.Sub(issued.CreatedAt) != time.Hour {
		t.Fatalf("issue: %d %s", a.status, a.body)
	}
	a = s.do(t, "GET", vp+"/keys", testToken, "")
	if bytes.Contains(a.body, []byte(issued.Key)) {
		t.Fatal("the key list shows the key")
	}
	var keys struct{ Keys []Key }
	a.decode(t, &keys)
	if len(keys.Keys) != 1 || keys.Keys[0].KeyID != issued.KeyID || keys.Keys[0].RevokedAt != nil {
		t.Fatalf("keys: %s", a.body)
	}
	var k Key
	a = s.do(t, "POST", "/admin/v1/keys/"+issued.KeyID+"/revoke", testToken, "")
	a.decode(t, &k)
	if a.status != 200 || k.RevokedAt == nil {
		t.Fatalf("revoke: %d %s", a.status, a.body)
	}
}

// A client without the token cannot make the listener hold a large body:
// refused 401 from its headers, before the body is read.
func TestLargeBodyWithoutTokenRefusedFromHeaders(t *testing.T) {
	s := start(t)
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "POST /admin/v1/vendors HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", 32<<20)
	// Not one body byte sent: the answer comes from the headers alone.
	buf := make([]byte, 4096)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("no answer before the body: %v", err)
	}
	if head := string(buf[:n]); !strings.HasPrefix(head, "HTTP/1.1 401") || !strings.Contains(head, `"invalid_api_key"`) {
		t.Fatalf("answer %q", head)
	}
}

// /readyz pings the database: ok while it answers, 503 with the check
// listed once it does not; ?exclude=database leaves it out.
func TestReadyzFollowsTheDatabase(t *testing.T) {
	s := start(t)
	a := s.do(t, "GET", "/readyz?verbose", "", "")
	if a.status != 200 || !strings.Contains(string(a.body), `"database":"ok"`) || !strings.Contains(string(a.body), `"checks"`) {
		t.Fatalf("ready: %d %s", a.status, a.body)
	}
	if err := s.close(); err != nil {
		t.Fatal(err)
	}
	a = s.do(t, "GET", "/readyz", "", "")
	if a.status != 503 || !strings.Contains(string(a.body), `"database":"unreachable"`) {
		t.Fatalf("closed database: %d %s", a.status, a.body)
	}
	if a := s.do(t, "GET", "/readyz?exclude=database", "", ""); a.status != 200 || !strings.Contains(string(a.body), `"database":"excluded"`) {
		t.Fatalf("excluded: %d %s", a.status, a.body)
	}
}
