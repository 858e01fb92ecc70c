package backend

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"vendorgate/config"

	"vendorgate/shared/wire"
)

const (
	testInternalToken = "test-internal-token-0123456789"
	testSigning       = "test-key-signing-secret-0123456789abcdef"
	testAdminToken    = "test-admin-token-0123456789ab"
	testPublicURL     = "http://gw.example:8080"
	testDelay         = time.Second // one sandbox step, on the test clock
)

// clock is the test clock: time moves only when a test moves it.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// harness is one Backend on loopback ports with a SQLite file in a
// temporary directory.
type harness struct {
	t     testing.TB
	b     *Backend
	o     Options
	api   string
	admin string
	clock *clock
	dir   string
}

func start(t testing.TB, mutate ...func(*Options)) *harness {
	t.Helper()
	dir := t.TempDir()
	c := &clock{t: time.Now().UTC()}
	cfg := config.DefaultBackend()
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Database, cfg.ReportsDir = filepath.Join(dir, "db", "vg.db"), filepath.Join(dir, "reports")
	cfg.PublicBaseURL, cfg.InternalToken, cfg.AdminToken = testPublicURL, testInternalToken, testAdminToken
	cfg.SandboxDelay, cfg.SweepInterval, cfg.MaxBodyBytes = testDelay, 10*time.Millisecond, 4096
	cfg.KeySigningSecrets = config.List{testSigning}
	o := Options{Config: cfg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: c.Now}
	for _, m := range mutate {
		m(&o)
	}
	h := &harness{t: t, o: o, clock: c, dir: dir}
	h.boot()
	return h
}

func (h *harness) boot() {
	h.t.Helper()
	b, err := New(context.Background(), h.o)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		h.t.Fatal(err)
	}
	h.b, h.api, h.admin = b, "http://"+b.Addr(), "http://"+b.AdminAddr()
	h.t.Cleanup(func() { h.stop() })
}

func (h *harness) stop() {
	if h.b == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.b.Shutdown(ctx); err != nil {
		h.t.Errorf("shutdown: %v", err)
	}
	h.b = nil
}

// restart stops the backend and starts a new one on the same files.
func (h *harness) restart() {
	h.stop()
	h.o.Config.Listen, h.o.Config.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	h.boot()
}

type resp struct {
	status int
	header http.Header
	body   []byte
}

func (r resp) code() string {
	var env struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(r.body, &env)
	return env.Error.Code
}

func (r resp) envelope(t testing.TB) (code string, fields map[string]string, orderID string) {
	t.Helper()
	var env struct {
		Error struct {
			Code    string            `json:"code"`
			Message string            `json:"message"`
			Fields  map[string]string `json:"fields"`
			OrderID string            `json:"order_id"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.body, &env); err != nil || env.Error.Message == "" {
		t.Fatalf("not an error envelope (%d): %s", r.status, r.body)
	}
	return env.Error.Code, env.Error.Fields, env.Error.OrderID
}

func (r resp) order(t testing.TB) wire.Order {
	t.Helper()
	var o wire.Order
	if err := json.Unmarshal(r.body, &o); err != nil || o.OrderID == "" {
		t.Fatalf("not an order (%d): %s", r.status, r.body)
	}
	return o
}

var httpClient = &http.Client{Timeout: 10 * time.Second}

func (h *harness) do(method, url string, hdr map[string]string, body string) resp {
	h.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := httpClient.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	return resp{status: res.StatusCode, header: res.Header, body: b}
}

// adminCall calls the admin API with the admin token.
func (h *harness) adminCall(method, path, body string) resp {
	h.t.Helper()
	return h.do(method, h.admin+path, map[string]string{"Authorization": "Bearer " + testAdminToken}, body)
}

// vendorCall calls the vendor API as the gateway does for vendorID.
func (h *harness) vendorCall(vendorID, method, path string, hdr map[string]string, body string) resp {
	h.t.Helper()
	all := map[string]string{wire.HeaderInternalToken: testInternalToken, wire.HeaderVendorID: vendorID}
	for k, v := range hdr {
		all[k] = v
	}
	return h.do(method, h.api+path, all, body)
}

func (h *harness) decode(r resp, want int, v any) {
	h.t.Helper()
	if r.status != want {
		h.t.Fatalf("status %d, want %d: %s", r.status, want, r.body)
	}
	if err := json.Unmarshal(r.body, v); err != nil {
		h.t.Fatalf("decode %s: %v", r.body, err)
	}
}

// newVendor creates a vendor through the admin API and approves it.
func (h *harness) newVendor(env string, services ...string) string {
	h.t.Helper()
	svc, _ := json.Marshal(services)
	if services == nil {
		svc = []byte("[]")
	}
	var v struct {
		VendorID string `json:"vendor_id"`
	}
	h.decode(h.adminCall("POST", "/admin/v1/vendors", fmt.Sprintf(`{"company_name":"Acme %s","environment":%q,"enabled_services":%s}`, env, env, svc)), 201, &v)
	if r := h.adminCall("POST", "/admin/v1/vendors/"+v.VendorID+"/approve", ""); r.status != 200 {
		h.t.Fatalf("approve: %d %s", r.status, r.body)
	}
	return v.VendorID
}

var allServices = []string{"mvr", "psp", "cdlis", "driver_reviews"}

func orderBody(license string, services ...string) string {
	if len(services) == 0 {
		services = allServices
	}
	svc, _ := json.Marshal(services)
	return fmt.Sprintf(`{"mc_number":"MC-123456","external_reference":"po-77","driver":{"first_name":"Ann","last_name":"Lee","date_of_birth":"1980-02-03","license_number":%q,"license_state":"TX"},"services":%s}`, license, svc)
}

// place posts an order body with an Idempotency-Key.
func (h *harness) place(vendorID, idemKey, body string) resp {
	h.t.Helper()
	return h.vendorCall(vendorID, "POST", "/api/vendor/v1/orders",
		map[string]string{"Content-Type": "application/json", wire.HeaderIdempotency: idemKey}, body)
}

// mustPlace places an order and returns it.
func (h *harness) mustPlace(vendorID, license string, services ...string) wire.Order {
	h.t.Helper()
	r := h.place(vendorID, "k-"+fmt.Sprint(time.Now().UnixNano()), orderBody(license, services...))
	if r.status != 202 {
		h.t.Fatalf("place: %d %s", r.status, r.body)
	}
	return r.order(h.t)
}

func (h *harness) get(vendorID, orderID string) wire.Order {
	h.t.Helper()
	r := h.vendorCall(vendorID, "GET", "/api/vendor/v1/orders/"+orderID, nil, "")
	if r.status != 200 && r.status != 202 {
		h.t.Fatalf("get order: %d %s", r.status, r.body)
	}
	return r.order(h.t)
}

// step moves the clock one sandbox step and waits until the simulator has
// worked the order (its services changed) or the timeout passes.
func (h *harness) step(vendorID, orderID string) wire.Order {
	h.t.Helper()
	before := h.get(vendorID, orderID)
	h.clock.Advance(testDelay)
	deadline := time.Now().Add(3 * time.Second)
	for {
		o := h.get(vendorID, orderID)
		if !sameServices(before, o) || time.Now().After(deadline) {
			return o
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// runSandbox runs one step of the simulated provider now, at the test
// clock's time, and returns once every due order has been worked: what the
// background runner would do on its next tick, without waiting for one. A
// test that something did not move on runs it and looks, instead of
// sleeping through ticks that might not have come.
func (h *harness) runSandbox() {
	h.t.Helper()
	h.b.bg.runner.Run()
}

// eventually polls the order until cond holds.
func (h *harness) eventually(vendorID, orderID string, cond func(wire.Order) bool) wire.Order {
	h.t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		o := h.get(vendorID, orderID)
		if cond(o) {
			return o
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("order never reached the expected state: %+v", o)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func sameServices(a, b wire.Order) bool {
	x, _ := json.Marshal(a.Services)
	y, _ := json.Marshal(b.Services)
	return string(x) == string(y)
}

func service(o wire.Order, name string) wire.ServiceEntry {
	for _, s := range o.Services {
		if s.Service == name {
			return s
		}
	}
	return wire.ServiceEntry{}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}
