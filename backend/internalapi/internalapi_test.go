package internalapi

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"vendorgate/backend/respond"
	"vendorgate/backend/store/sqlite"
	"vendorgate/backend/vendors"
	"vendorgate/shared/apierr"
	"vendorgate/shared/apikey"
	"vendorgate/shared/wire"
)

const testToken = "internal-token-0123456789abcdef"

// startAPI serves the internal key lookup, guarded, over a real loopback
// listener in front of a real SQLite store, and returns its base URL and
// one issued key.
func startAPI(t *testing.T) (string, string) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "vg.db"))
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
	v, err := vs.Create(ctx, "Acme", "sandbox", []string{wire.MVR})
	if err != nil {
		t.Fatal(err)
	}
	key, _, err := vs.IssueKey(ctx, v.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	api := New(testToken, vs, log)
	r := respond.NewRouter(log)
	r.GET("/internal/v1/keys/{hash}", api.Guard(api.LookupKey))
	r.GET("/api/vendor/v1/me", api.Guard(func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("reached") }))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: r.Handler}
	done := make(chan struct{})
	go func() { _ = srv.Serve(ln); close(done) }()
	t.Cleanup(func() { _ = srv.Shutdown(); <-done })
	return "http://" + ln.Addr().String(), key
}

func call(t *testing.T, url, raw string) (int, string) {
	t.Helper()
	addr := strings.TrimPrefix(url, "http://")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	var resp fasthttp.Response
	if err := resp.Read(bufio.NewReader(c)); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode(), string(resp.Body())
}

// TestGuard: only a call carrying the internal token gets through, and one
// naming the caller twice (a client's forged copy beside the gateway's) is
// refused. Each case fails if the guard lets it through or refuses it
// otherwise.
func TestGuard(t *testing.T) {
	base, _ := startAPI(t)
	head := "GET /api/vendor/v1/me HTTP/1.1\r\nHost: b\r\nConnection: close\r\n"
	cases := []struct {
		name, headers string
		status        int
		want          string
	}{
		{"no token", "", 401, `"code":"invalid_api_key"`},
		{"wrong token", "X-Internal-Token: " + testToken[:len(testToken)-1] + "x\r\n", 401, `"code":"invalid_api_key"`},
		{"token prefix", "X-Internal-Token: " + testToken[:8] + "\r\n", 401, `"code":"invalid_api_key"`},
		{"right token", "X-Internal-Token: " + testToken + "\r\nX-Vendor-Id: v1\r\n", 200, "reached"},
		{"vendor id twice", "X-Internal-Token: " + testToken + "\r\nX-Vendor-Id: v1\r\nx-vendor-id: v2\r\n", 400, wire.HeaderVendorID},
		{"key id twice", "X-Internal-Token: " + testToken + "\r\nX-Key-Id: k1\r\nX-KEY-ID: k2\r\n", 400, wire.HeaderKeyID},
		{"environment twice", "X-Internal-Token: " + testToken + "\r\nX-Vendor-Environment: sandbox\r\nX-Vendor-Environment: live\r\n", 400, wire.HeaderEnvironment},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, body := call(t, base, head+c.headers+"\r\n")
			if status != c.status || !strings.Contains(body, c.want) {
				t.Fatalf("%d %s; want %d holding %s", status, body, c.status, c.want)
			}
		})
	}
}

// TestLookupKey: the lookup answers a key's resolution by the hash of the
// whole key, and the 404 envelope for a hash no key has. It fails if the
// lookup answers another key, another shape, or anything for a wrong hash.
func TestLookupKey(t *testing.T) {
	base, key := startAPI(t)
	lookup := func(hash string) (int, string) {
		return call(t, base, "GET "+wire.KeyLookupPath+hash+" HTTP/1.1\r\nHost: b\r\nConnection: close\r\nX-Internal-Token: "+testToken+"\r\n\r\n")
	}
	status, body := lookup(apikey.Hash(key))
	var res wire.KeyResolution
	if err := json.Unmarshal([]byte(body), &res); err != nil || status != 200 || res.KeyID == "" || res.VendorID == "" || res.Environment != "sandbox" {
		t.Fatalf("lookup of an issued key: %d %s", status, body)
	}
	status, body = lookup(apikey.Hash(key + "x"))
	if e, ok := apierr.Parse([]byte(body)); status != 404 || !ok || e.Code != apierr.NotFound {
		t.Fatalf("lookup of an unknown hash: %d %s; want the 404 envelope", status, body)
	}
}
