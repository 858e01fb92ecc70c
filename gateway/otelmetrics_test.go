package gateway

import (
	"strconv"
	"strings"
	"testing"
)

// TestOTelHTTPServerDuration: beside its own metric names, the gateway
// exports OpenTelemetry's http.server.request.duration as Prometheus
// names it, http_server_request_duration_seconds: the advised buckets (5 ms
// to 10 s), labelled by http_route (the route's pattern),
// http_request_method, http_response_status_code and error_type (the
// status code of a 5xx answer, empty otherwise).
func TestOTelHTTPServerDuration(t *testing.T) {
	b, gw, key, _ := startWithKey(t)
	if r := do(t, "GET", gw.url+"/api/vendor/v1/me", key); r.status != 200 {
		t.Fatalf("me: %d %s", r.status, r.body)
	}
	b.stop()
	failed := do(t, "GET", gw.url+"/api/vendor/v1/orders/abc", key)
	if failed.status < 500 {
		t.Fatalf("with the backend stopped: %d, want a 5xx", failed.status)
	}
	code := strconv.Itoa(failed.status)
	m := scrape(t, gw)
	ok := `{error_type="",http_request_method="GET",http_response_status_code="200",http_route="/api/vendor/v1/me"`
	bad := `{error_type="` + code + `",http_request_method="GET",http_response_status_code="` + code + `",http_route="/api/vendor/v1/orders/{order_id}"`
	for _, le := range []string{"0.005", "0.01", "0.025", "0.05", "0.075", "0.1", "0.25", "0.5", "0.75", "1", "2.5", "5", "7.5", "10", "+Inf"} {
		if want := "http_server_request_duration_seconds_bucket" + ok + `,le="` + le + `"}`; !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	for _, want := range []string{"http_server_request_duration_seconds_count" + ok + "} 1", "http_server_request_duration_seconds_count" + bad + "} 1",
		"# TYPE http_server_request_duration_seconds histogram"} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(m, `http_server_request_duration_seconds_bucket{error_type="",http_request_method="GET",http_response_status_code="200",http_route="/api/vendor/v1/me",le="0.0001"}`) {
		t.Error("the OTel histogram has buckets other than the advised ones")
	}
}
