package metrics

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"

	"vendorgate/backend/store/sqlite"
	"vendorgate/shared/testlog"
)

// serve serves h on a loopback listener until the test ends.
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

func get(t *testing.T, method, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// One backend's metrics over real HTTP: requests by route pattern (never
// the path), an invented method folded into "other", the domain counters,
// and the orders gauge read from a real SQLite store at each scrape.
func TestMetricsOverHTTP(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "vg.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	var logs testlog.Buffer
	m := New(st.CountOrdersByStatus, slog.New(slog.NewTextHandler(&logs, nil)))
	r := router.New()
	r.SaveMatchedRoutePath = true
	r.GET("/api/vendor/v1/orders/{order_id}", func(ctx *fasthttp.RequestCtx) { ctx.SetStatusCode(200) })
	r.GET("/metrics", m.Handler())
	url := serve(t, m.Instrument(r.Handler))

	for _, id := range []string{"order-7f3a", "order-9b2c"} {
		if code, _ := get(t, "GET", url+"/api/vendor/v1/orders/"+id); code != 200 {
			t.Fatalf("order %s: %d", id, code)
		}
	}
	if code, _ := get(t, "M1", url+"/nowhere"); code != 404 {
		t.Fatalf("unknown path: %d", code)
	}
	m.OrderCreated("sandbox")
	m.SweeperRun(3)
	m.SimulatorStep("mvr", "completed")

	code, body := get(t, "GET", url+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{
		`vendorgate_backend_requests_total{method="GET",route="/api/vendor/v1/orders/{order_id}",status="200"} 2`,
		`vendorgate_backend_requests_total{method="other",route="unmatched",status="404"} 1`,
		`vendorgate_backend_request_duration_seconds_count{route="/api/vendor/v1/orders/{order_id}"} 2`,
		`vendorgate_backend_orders_created_total{environment="sandbox"} 1`,
		`vendorgate_backend_sweeper_runs_total 1`,
		`vendorgate_backend_sweeper_orders_closed_total 3`,
		`vendorgate_backend_simulator_steps_total{outcome="completed",service="mvr"} 1`,
		`vendorgate_backend_orders{status="processing"} 0`,
		`vendorgate_backend_orders{status="partially_completed"} 0`,
		`go_goroutines`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	for _, never := range []string{"order-7f3a", "M1", "/nowhere"} {
		if strings.Contains(body, never) {
			t.Errorf("/metrics carries %q, a value a client chose", never)
		}
	}

	// A store that cannot count leaves the gauge out and says why, but the
	// scrape still answers.
	_ = st.Close()
	code, body = get(t, "GET", url+"/metrics")
	if code != 200 || strings.Contains(body, "vendorgate_backend_orders{") || !strings.Contains(body, "vendorgate_backend_sweeper_runs_total 1") {
		t.Fatalf("scrape with a closed store: %d, gauge present %v", code, strings.Contains(body, "vendorgate_backend_orders{"))
	}
	deadline := time.Now().Add(2 * time.Second)
	for !strings.Contains(logs.String(), "count orders for metrics") {
		if time.Now().After(deadline) {
			t.Fatalf("failed count not logged: %s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Every standard method keeps its name; anything else is "other".
func TestMethodLabel(t *testing.T) {
	for _, m := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE"} {
		if got := methodLabel([]byte(m)); got != m {
			t.Errorf("methodLabel(%s) = %s", m, got)
		}
	}
	for _, m := range []string{"get", "M1", "", "PROPFIND"} {
		if got := methodLabel([]byte(m)); got != "other" {
			t.Errorf("methodLabel(%q) = %s, want other", m, got)
		}
	}
}
