package admin

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"vendorgate/gateway/usage"
	"vendorgate/shared/readyz"
)

// serve runs h on a real loopback listener and returns its base URL.
func serve(t *testing.T, h fasthttp.RequestHandler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: h}
	done := make(chan struct{})
	go func() { _ = srv.Serve(ln); close(done) }()
	t.Cleanup(func() { _ = srv.Shutdown(); <-done })
	return "http://" + ln.Addr().String()
}

type answer struct {
	status int
	header http.Header
	body   string
}

func get(t *testing.T, method, url string, hdr map[string]string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header, string(b)}
}

// TestAdminRoutes: each admin path answers its job, every answer is
// no-store, and paths it does not serve are the 404 envelope. A case fails
// if its route is dropped or answers another shape.
func TestAdminRoutes(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "vendorgate_admin_test_total", Help: "a test counter"})
	reg.MustRegister(c)
	c.Add(3)
	withDoc := serve(t, Handler(Options{Registry: reg, OpenAPI: []byte("openapi: 3.1.0\n")}))
	bare := serve(t, Handler(Options{Registry: prometheus.NewRegistry()}))

	cases := []struct {
		name, url   string
		status      int
		contentType string
		body        string // a part the body holds
	}{
		{"healthz", withDoc + "/healthz", 200, "application/json", `{"status":"ok"}`},
		{"metrics", withDoc + "/metrics", 200, "text/plain", "vendorgate_admin_test_total 3"},
		{"openapi", withDoc + "/openapi.yaml", 200, "application/yaml", "openapi: 3.1.0"},
		{"openapi unset", bare + "/openapi.yaml", 404, "", ""},
		{"usage unset", bare + "/usage", 404, "application/json", `"code":"not_found"`},
		{"usage vendor unset", bare + "/usage/v1", 404, "application/json", `"code":"not_found"`},
		{"unknown path", withDoc + "/admin", 404, "application/json", `"code":"not_found"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := get(t, "GET", tc.url, nil)
			if a.status != tc.status || !strings.HasPrefix(a.header.Get("Content-Type"), tc.contentType) || !strings.Contains(a.body, tc.body) {
				t.Fatalf("GET %s = %d %q %q; want %d %q holding %q", tc.url, a.status, a.header.Get("Content-Type"), a.body,
					tc.status, tc.contentType, tc.body)
			}
			if a.header.Get("Cache-Control") != "no-store" {
				t.Fatalf("Cache-Control %q; want no-store", a.header.Get("Cache-Control"))
			}
		})
	}
}

// TestReadyz: /readyz is 200 while every check passes and 503 naming the
// failing ones otherwise, lists every check on ?verbose and on failure,
// and leaves out what ?exclude names. It fails if a failing check does
// not make the answer 503 or the body's shape changes.
func TestReadyz(t *testing.T) {
	redisDown := errors.New("redis: connection refused")
	base := serve(t, Handler(Options{Registry: prometheus.NewRegistry(), Checks: []readyz.Check{
		{Name: "draining", Run: func(context.Context) error { return nil }},
		{Name: "redis", Run: func(context.Context) error { return redisDown }},
		{Name: "backends", Run: func(context.Context) error { return readyz.Degraded(errors.New("1 of 2 down")) }},
	}}))
	type body struct {
		Status    string          `json:"status"`
		Unhealthy []string        `json:"unhealthy"`
		Checks    []readyz.Result `json:"checks"`
	}
	read := func(t *testing.T, query string, wantStatus int) body {
		t.Helper()
		a := get(t, "GET", base+"/readyz"+query, nil)
		var b body
		if err := json.Unmarshal([]byte(a.body), &b); err != nil || a.status != wantStatus {
			t.Fatalf("/readyz%s = %d %s (%v); want %d", query, a.status, a.body, err, wantStatus)
		}
		return b
	}
	t.Run("a failing check", func(t *testing.T) {
		b := read(t, "", 503)
		if b.Status != "unready" || len(b.Unhealthy) != 1 || b.Unhealthy[0] != "redis" || len(b.Checks) != 3 {
			t.Fatalf("body %+v; want unready, redis unhealthy, three checks listed", b)
		}
	})
	t.Run("the failing check excluded", func(t *testing.T) {
		if b := read(t, "?exclude=redis", 200); b.Status != "ready" || len(b.Checks) != 0 {
			t.Fatalf("body %+v; want ready and no list", b)
		}
	})
	t.Run("verbose", func(t *testing.T) {
		b := read(t, "?exclude=redis&verbose", 200)
		if b.Status != "ready" || len(b.Checks) != 3 || b.Checks[1].Status != "excluded" ||
			b.Checks[2].Name != "backends" || !strings.Contains(b.Checks[2].Reason, "1 of 2 down") {
			t.Fatalf("body %+v; want ready, three checks, redis excluded, backends with its reason", b)
		}
	})
}

// TestUsageView: the usage view is off without a token, asks for the
// bearer token, reads only, validates its query, and answers from the
// store. Each case fails if its refusal (or the answer) goes.
func TestUsageView(t *testing.T) {
	const token = "admin-token-0123456789"
	reader := &usage.Reader{Store: usage.NewLocal(time.Now)}
	on := serve(t, Handler(Options{Registry: prometheus.NewRegistry(), Usage: UsageHandler(UsageOptions{Token: token, Reader: reader})}))
	off := serve(t, Handler(Options{Registry: prometheus.NewRegistry(), Usage: UsageHandler(UsageOptions{Reader: reader})}))
	auth := map[string]string{"Authorization": "Bearer " + token}
	cases := []struct {
		name, method, url string
		hdr               map[string]string
		status            int
		body              string
	}{
		{"off without a token", "GET", off + "/usage", auth, 403, `"code":"permission_denied"`},
		{"no token sent", "GET", on + "/usage", nil, 401, `"code":"invalid_api_key","message":"admin token required`},
		{"wrong token", "GET", on + "/usage", map[string]string{"Authorization": "Bearer nope"}, 401, `"code":"invalid_api_key","message":"admin token refused: it is not this gateway's admin_token (GATEWAY_ADMIN_TOKEN)"`},
		{"not GET", "POST", on + "/usage", auth, 405, `"code":"method_not_allowed"`},
		{"bad window", "GET", on + "/usage?window=90s", auth, 400, `"window"`},
		{"bad top", "GET", on + "/usage?top=0", auth, 400, `"top"`},
		{"nested vendor path", "GET", on + "/usage/v1/x", auth, 404, `"code":"not_found"`},
		{"top", "GET", on + "/usage?window=1h&top=5", auth, 200, `"window"`},
		{"one vendor", "GET", on + "/usage/v1?window=15m", auth, 200, `"vendor_id":"v1"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := get(t, tc.method, tc.url, tc.hdr)
			if a.status != tc.status || !strings.Contains(a.body, tc.body) {
				t.Fatalf("%s %s = %d %s; want %d holding %s", tc.method, tc.url, a.status, a.body, tc.status, tc.body)
			}
			if a.status == 401 && a.header.Get("WWW-Authenticate") == "" {
				t.Fatal("a 401 without WWW-Authenticate")
			}
			if a.status == 405 && a.header.Get("Allow") != "GET" {
				t.Fatalf("Allow %q; want GET", a.header.Get("Allow"))
			}
		})
	}
}

// The gateway exports the Go runtime's and the process's metrics beside its
// own, as the backend does.
func TestMetricsHaveRuntimeAndProcess(t *testing.T) {
	m := NewMetrics([]string{"unmatched"})
	url := serve(t, Handler(Options{Registry: m.Registry}))
	a := get(t, "GET", url+"/metrics", nil)
	for _, name := range []string{"go_goroutines ", "go_memstats_heap_alloc_bytes ", "go_gc_duration_seconds",
		"process_cpu_seconds_total ", "process_resident_memory_bytes ", "process_open_fds "} {
		if !strings.Contains(a.body, "\n"+name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
}
