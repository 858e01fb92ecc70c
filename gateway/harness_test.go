package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"vendorgate/config"
	"vendorgate/gateway/openapi"
	"vendorgate/shared/apierr"
	"vendorgate/shared/apikey"
	"vendorgate/shared/wire"
)

const (
	testToken = "test-internal-token-0123456789"
	// testSigning is the key-signing secret the test backend signs with.
	testSigning = "test-key-signing-secret-0123456789abcdef"
)

// signedKey is a key signed as the backend signs them, known or not.
func signedKey(t testing.TB) string {
	t.Helper()
	s, err := apikey.NewSigner([]string{testSigning})
	if err != nil {
		t.Fatal(err)
	}
	k, err := s.Generate(apikey.DefaultPrefixes(), apikey.Sandbox)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// testBackend implements the backend's side of the contract: the internal
// key lookup, and vendor routes that echo what the gateway asserted.
type testBackend struct {
	t            testing.TB
	mu           sync.Mutex
	keys         map[string]wire.KeyResolution // by hash
	lookups      atomic.Int64
	calls        atomic.Int64
	probes       atomic.Int64 // readiness probes
	usageFlushes atomic.Int64 // usage flushes posted (wire.UsageFlushPath)
	refuseUsage  atomic.Bool  // answer usage flushes 503
	ln           net.Listener
	addr         string
	srv          *fasthttp.Server
	delay        atomic.Int64 // ns, for /slow
	// hold, when set, holds every key lookup until it is closed.
	hold atomic.Pointer[chan struct{}]
	// lookupDelay (ns) slows every key lookup down.
	lookupDelay atomic.Int64
	// report, when set, answers the report routes instead (under mu).
	report fasthttp.RequestHandler
}

func newTestBackend(t testing.TB) *testBackend {
	b := &testBackend{t: t, keys: map[string]wire.KeyResolution{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b.addr = ln.Addr().String()
	b.serve(ln)
	t.Cleanup(b.stop)
	return b
}

func (b *testBackend) serve(ln net.Listener) {
	b.ln = ln
	srv := &fasthttp.Server{Handler: b.handle, CloseOnShutdown: true}
	b.srv = srv
	go func() { _ = srv.Serve(ln) }()
}

func (b *testBackend) URL() string { return "http://" + b.addr }

// stop closes the listener and every connection.
func (b *testBackend) stop() {
	b.mu.Lock()
	srv, ln := b.srv, b.ln
	b.srv = nil
	b.mu.Unlock()
	if srv != nil {
		// Close the listener too: Shutdown only closes listeners that Serve
		// has registered, and Serve runs in a goroutine that may not have
		// started yet.
		_ = ln.Close()
		_ = srv.Shutdown()
	}
}

// restart listens again on the same address.
func (b *testBackend) restart() {
	var ln net.Listener
	var err error
	for i := 0; i < 100; i++ {
		if ln, err = net.Listen("tcp", b.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		b.t.Fatal(err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.serve(ln)
}

// addKey issues a key for vendor (status) and returns it.
func (b *testBackend) addKey(vendorID, status string, expires time.Time) (key string, res wire.KeyResolution) {
	key = signedKey(b.t)
	res = wire.KeyResolution{KeyID: "key-" + key[9:17], VendorID: vendorID, Environment: apikey.Sandbox,
		CreatedAt: time.Now().Add(-time.Hour), ExpiresAt: expires,
		Vendor: wire.VendorInfo{Status: status, CompanyName: "Test " + vendorID, EnabledServices: wire.Services()}}
	b.mu.Lock()
	b.keys[apikey.Hash(key)] = res
	b.mu.Unlock()
	return key, res
}

func (b *testBackend) setReport(h fasthttp.RequestHandler) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.report = h
}

func (b *testBackend) reportHandler() fasthttp.RequestHandler {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.report
}

func (b *testBackend) update(key string, fn func(*wire.KeyResolution)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.keys[apikey.Hash(key)]
	fn(&r)
	b.keys[apikey.Hash(key)] = r
}

func (b *testBackend) handle(ctx *fasthttp.RequestCtx) {
	if bytes.HasSuffix(ctx.Path(), []byte("/fast")) { // benchmarks: allocation-free
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"order_id":"fast"}`)
		return
	}
	if string(ctx.Request.Header.Peek(wire.HeaderInternalToken)) != testToken {
		ctx.SetStatusCode(401)
		ctx.SetBody(apierr.New(apierr.InvalidAPIKey, "internal token required").Body())
		return
	}
	path := string(ctx.Path())
	if path == wire.ReadyPath { // the gateway's readiness probe: not a call
		b.probes.Add(1)
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"status":"ok","database":"ok"}`)
		return
	}
	if path == wire.UsageFlushPath { // the gateway's usage flushes: not a call
		if b.refuseUsage.Load() {
			ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
			return
		}
		b.usageFlushes.Add(1)
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"applied":true}`)
		return
	}
	if h, ok := strings.CutPrefix(path, wire.KeyLookupPath); ok {
		b.lookups.Add(1)
		if h := b.hold.Load(); h != nil {
			<-*h
		}
		time.Sleep(time.Duration(b.lookupDelay.Load()))
		b.mu.Lock()
		r, found := b.keys[h]
		b.mu.Unlock()
		if !found {
			ctx.SetStatusCode(404)
			ctx.SetBody(apierr.New(apierr.NotFound, "no such key").Body())
			return
		}
		body, _ := json.Marshal(r)
		ctx.SetContentType("application/json")
		ctx.SetBody(body)
		return
	}
	b.calls.Add(1)
	ctx.Response.Header.Set("Cache-Control", "no-store")
	switch {
	case strings.HasSuffix(path, "/plain-error"):
		ctx.SetStatusCode(502)
		ctx.SetBodyString("<html>bad gateway</html>")
		return
	case strings.HasSuffix(path, "/envelope-error"):
		ctx.SetStatusCode(404)
		ctx.SetBody(apierr.New(apierr.NotFound, "order not found").Body())
		return
	case strings.HasSuffix(path, "/slow"):
		time.Sleep(time.Duration(b.delay.Load()))
	case strings.Contains(path, "/reports/") && b.reportHandler() != nil:
		b.reportHandler()(ctx)
		return
	case strings.HasSuffix(path, "/reports/mvr"):
		ctx.SetContentType("application/pdf")
		ctx.Response.Header.Set("Keep-Alive", "timeout=5")
		ctx.Response.Header.Set(wire.HeaderVendorID, "leak")
		ctx.SetBody(make([]byte, 3<<20))
		return
	}
	echo := map[string]string{}
	copies := map[string]int{}
	for k, v := range ctx.Request.Header.All() {
		echo[string(k)] = string(v)
		copies[http.CanonicalHeaderKey(string(k))]++
	}
	for k, n := range copies {
		if n > 1 { // a header sent more than once: "copies:Name" says how often
			echo["copies:"+k] = strconv.Itoa(n)
		}
	}
	echo["method"] = string(ctx.Method())
	echo["body"] = string(ctx.PostBody())
	body, _ := json.Marshal(echo)
	ctx.Response.Header.Set("Location", "/api/vendor/v1/orders/x")
	ctx.Response.Header.Set("Retry-After", "7")
	ctx.SetContentType("application/json")
	ctx.SetStatusCode(200)
	ctx.SetBody(body)
}

// testGateway is one gateway on loopback listeners.
type testGateway struct {
	g     *Gateway
	cfg   *config.Gateway // the configuration it started with
	url   string
	admin string
}

// testPublicBaseURL is the gateway's configured public address in tests.
const testPublicBaseURL = "https://api.vendorgate.test"

// testConfig is the defaults with small limits, so that tests reach them
// quickly, and short breaker and Redis timeouts.
func testConfig(b *testBackend) *config.Gateway {
	c := config.DefaultGateway()
	c.BackendURL = config.List{b.URL()}
	c.InternalToken = testToken
	c.KeySigningSecrets = config.List{testSigning}
	c.PublicBaseURL = testPublicBaseURL
	c.Limits = config.Limits{Vendor: config.LimitPair{
		Reads:  config.Limit{Rate: 5, Period: time.Minute},
		Orders: config.Limit{Rate: 2, Period: time.Minute},
	}}
	c.KeyCache = config.KeyCache{Size: 1000, TTL: 30 * time.Second, NegativeTTL: 5 * time.Second}
	c.Proxy.Timeout, c.Proxy.MaxConns = 2*time.Second, 64
	c.Proxy.BreakerOpenFor, c.Proxy.BreakerFailures = 300*time.Millisecond, 3
	// 250ms, not the 50ms default: -race on a loaded 2-core machine
	// sometimes needs more, and a slow answer here is not what is tested.
	c.Redis.Timeout, c.Redis.PoolSize = 250*time.Millisecond, 16
	c.Redis.BreakerOpenFor, c.Redis.BreakerFailures = 300*time.Millisecond, 3
	c.MaxBodyBytes = 1 << 16
	// Every test client is 127.0.0.1, and Go's client opens a connection
	// for each request past its two idle ones: the new-connections bound
	// is the clientbounds tests' to set.
	c.MaxNewConnsPerPeer = 100000
	c.Version = "test"
	return c
}

// startWithKey starts a backend and a gateway with the test options and adds
// an approved key of vendor-a that expires in an hour.
func startWithKey(t testing.TB) (*testBackend, *testGateway, string, wire.KeyResolution) {
	b := newTestBackend(t)
	gw := startGateway(t, b, nil)
	key, res := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	return b, gw, key, res
}

func startGateway(t testing.TB, b *testBackend, mod func(*Options)) *testGateway {
	o := Options{
		Config:  testConfig(b),
		Logger:  slog.New(slog.NewJSONHandler(io.Discard, nil)),
		OpenAPI: openapi.Document,
	}
	if mod != nil {
		mod(&o)
	}
	g, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	adm, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = g.Serve(pub, adm); close(done) }()
	t.Cleanup(func() {
		_ = g.Shutdown(0, 5*time.Second)
		<-done
	})
	return &testGateway{g: g, cfg: o.Config, url: "http://" + pub.Addr().String(), admin: "http://" + adm.Addr().String()}
}

var httpClient = &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

type answer struct {
	status int
	header http.Header
	body   []byte
	env    apierr.Detail
	isEnv  bool
	echo   map[string]string
	closes bool // Connection: close (readAnswer only)
}

// do sends one request; key "" sends none. extra are header pairs.
func do(t testing.TB, method, url, key string, extra ...string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set(wire.HeaderAPIKey, key)
	}
	for i := 0; i+1 < len(extra); i += 2 {
		req.Header.Add(extra[i], extra[i+1])
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, header: resp.Header, body: body}
	a.env, a.isEnv = apierr.Parse(body)
	if resp.StatusCode < 300 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		_ = json.Unmarshal(body, &a.echo)
	}
	return a
}

// wantError checks status and envelope code, and the headers every answer
// carries.
func (a answer) wantError(t testing.TB, status int, code apierr.Code) {
	t.Helper()
	if a.status != status || !a.isEnv || a.env.Code != code {
		t.Fatalf("got %d %s, want %d envelope %s", a.status, a.body, status, code)
	}
	a.wantCommon(t)
}

func (a answer) wantCommon(t testing.TB) {
	t.Helper()
	if a.header.Get("Cache-Control") != "no-store" || a.header.Get("X-Request-Id") == "" {
		t.Fatalf("missing common headers: %v", a.header)
	}
}

func hashOf(key string) string { return apikey.Hash(key) }
