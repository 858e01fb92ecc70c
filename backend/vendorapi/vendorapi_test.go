package vendorapi

import (
	"context"
	"encoding/json"
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
	"vendorgate/backend/orders"
	"vendorgate/backend/reports"
	"vendorgate/backend/respond"
	"vendorgate/backend/store/sqlite"
	"vendorgate/backend/vendors"
	"vendorgate/shared/apierr"
	"vendorgate/shared/apikey"
	"vendorgate/shared/wire"
)

const publicURL = "http://gw.example"

// fixture is the vendor API on a real loopback listener, in front of the
// real vendor and order domains and a SQLite store, with one vendor in
// each status. The internal-token guard is left out (it has its own
// tests): the API is reached as the gateway reaches it.
type fixture struct {
	base                         string
	approved, pending, suspended string
}

func start(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "vg.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	signer, err := apikey.NewSigner([]string{"signing-secret-0123456789abcdef0123"})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	vs, err := vendors.New(vendors.Options{Store: st, Prefixes: apikey.DefaultPrefixes(), Signer: signer, KeyLifetime: 90 * 24 * time.Hour, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := reports.New(filepath.Join(dir, "reports"))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := orders.New(orders.Options{Store: st, Reports: rs, PublicBaseURL: publicURL, Deadline: 48 * time.Hour, SandboxDelay: time.Hour, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{}
	for _, v := range []struct {
		id     *string
		action string
	}{{&f.approved, "approve"}, {&f.pending, ""}, {&f.suspended, "suspend"}} {
		sv, err := vs.Create(ctx, "Acme", "sandbox", []string{wire.MVR, wire.PSP})
		if err != nil {
			t.Fatal(err)
		}
		if v.action != "" {
			if _, _, err := vs.SetStatus(ctx, sv.ID, v.action); err != nil {
				t.Fatal(err)
			}
		}
		*v.id = sv.ID
	}
	r := respond.NewRouter(log)
	al, err := audit.New(st, time.Now, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	api, err := New(Options{Vendors: vs, Orders: svc, Audit: al, MaxBodyBytes: 512, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	api.Register(r, func(h fasthttp.RequestHandler) fasthttp.RequestHandler { return h })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: r.Handler}
	done := make(chan struct{})
	go func() { _ = srv.Serve(ln); close(done) }()
	t.Cleanup(func() { _ = srv.Shutdown(); <-done })
	f.base = "http://" + ln.Addr().String()
	return f
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

func (f *fixture) call(t *testing.T, method, path, vendorID string, hdr map[string]string, body string) answer {
	t.Helper()
	req, err := http.NewRequest(method, f.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if vendorID != "" {
		req.Header.Set(wire.HeaderVendorID, vendorID)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, b}
}

func (a answer) code() apierr.Code {
	d, _ := apierr.Parse(a.body)
	return d.Code
}

const order = `{"mc_number":"MC-123456","external_reference":"po-77","driver":{"first_name":"Ann","last_name":"Lee",` +
	`"date_of_birth":"1980-02-03","license_number":"D1234567","license_state":"TX"},"services":["mvr"]}`

var jsonType = map[string]string{"Content-Type": "application/json; charset=utf-8", wire.HeaderIdempotency: "idem-1"}

// TestCallerRefusals: the caller is the vendor X-Vendor-Id names; none,
// an unknown one and one not approved yet are refused, a suspended one may
// read but not order, and an order body is bounded and must be JSON. Each
// case fails if its refusal goes or answers another code.
func TestCallerRefusals(t *testing.T) {
	f := start(t)
	cases := []struct {
		name, method, path, vendor string
		hdr                        map[string]string
		body                       string
		status                     int
		code                       apierr.Code
	}{
		{"no vendor identity", "GET", "/api/vendor/v1/me", "", nil, "", 401, apierr.InvalidAPIKey},
		{"unknown vendor", "GET", "/api/vendor/v1/me", "0b9a7f0e-1111-4222-8333-444455556666", nil, "", 401, apierr.InvalidAPIKey},
		{"not approved yet", "GET", "/api/vendor/v1/me", f.pending, nil, "", 403, apierr.AccountNotApproved},
		{"not approved yet, orders", "GET", "/api/vendor/v1/orders", f.pending, nil, "", 403, apierr.AccountNotApproved},
		{"suspended may not order", "POST", "/api/vendor/v1/orders", f.suspended, jsonType, order, 403, apierr.AccountSuspended},
		{"body over the limit", "POST", "/api/vendor/v1/orders", f.approved, jsonType, order + strings.Repeat(" ", 512), 413, apierr.PayloadTooLarge},
		{"not JSON", "POST", "/api/vendor/v1/orders", f.approved, map[string]string{"Content-Type": "text/plain"}, order, 415, apierr.UnsupportedMediaType},
		{"no such order", "GET", "/api/vendor/v1/orders/0b9a7f0e-1111-4222-8333-444455556666", f.approved, nil, "", 404, apierr.NotFound},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := f.call(t, c.method, c.path, c.vendor, c.hdr, c.body)
			if a.status != c.status || a.code() != c.code {
				t.Fatalf("%s %s = %d %s; want %d %s", c.method, c.path, a.status, a.body, c.status, c.code)
			}
		})
	}
	if a := f.call(t, "GET", "/api/vendor/v1/me", f.suspended, nil, ""); a.status != 200 {
		t.Fatalf("a suspended vendor's /me = %d %s; want 200", a.status, a.body)
	}
}

// TestMeAndOrders: /me names the caller; a placed order answers 202 with
// Location and Retry-After while it runs, reads back the same, and is
// listed. It fails if an answer loses its status, headers or content.
func TestMeAndOrders(t *testing.T) {
	f := start(t)
	a := f.call(t, "GET", "/api/vendor/v1/me", f.approved, nil, "")
	var me wire.Vendor
	if err := json.Unmarshal(a.body, &me); err != nil || a.status != 200 || me.VendorID != f.approved ||
		strings.Join(me.EnabledServices, ",") != "mvr,psp" || a.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("/me = %d %s", a.status, a.body)
	}

	a = f.call(t, "POST", "/api/vendor/v1/orders", f.approved, jsonType, order)
	var placed wire.Order
	if err := json.Unmarshal(a.body, &placed); err != nil || a.status != 202 || placed.OrderID == "" {
		t.Fatalf("place = %d %s", a.status, a.body)
	}
	loc := publicURL + "/api/vendor/v1/orders/" + placed.OrderID
	if a.header.Get("Location") != loc || a.header.Get("Retry-After") == "" {
		t.Fatalf("place headers %v; want Location %s and Retry-After", a.header, loc)
	}
	if again := f.call(t, "POST", "/api/vendor/v1/orders", f.approved, jsonType, order); again.status != 202 || !strings.Contains(string(again.body), placed.OrderID) {
		t.Fatalf("the same Idempotency-Key again = %d %s; want the same order", again.status, again.body)
	}

	a = f.call(t, "GET", "/api/vendor/v1/orders/"+placed.OrderID, f.approved, nil, "")
	if a.status != 202 || a.header.Get("Location") != loc || !strings.Contains(string(a.body), `"status":"processing"`) {
		t.Fatalf("get while running = %d %v %s", a.status, a.header, a.body)
	}
	// Another vendor's order does not exist for the caller.
	if a := f.call(t, "GET", "/api/vendor/v1/orders/"+placed.OrderID, f.suspended, nil, ""); a.status != 404 || a.code() != apierr.NotFound {
		t.Fatalf("another vendor's order = %d %s; want 404", a.status, a.body)
	}

	a = f.call(t, "GET", "/api/vendor/v1/orders?limit=10", f.approved, nil, "")
	var list wire.OrderList
	if err := json.Unmarshal(a.body, &list); err != nil || a.status != 200 || len(list.Orders) != 1 || list.Orders[0].OrderID != placed.OrderID {
		t.Fatalf("list = %d %s", a.status, a.body)
	}
}
