package gateway

import "testing"

// TestTraceContextReachesBackend: W3C traceparent and tracestate pass
// through to the backend unchanged, so a trace spans both.
func TestTraceContextReachesBackend(t *testing.T) {
	_, gw, key, _ := startWithKey(t)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	a := do(t, "GET", gw.url+"/api/vendor/v1/me", key, "traceparent", tp, "tracestate", "vg=1")
	if a.status != 200 {
		t.Fatalf("status %d %s", a.status, a.body)
	}
	if a.echo["Traceparent"] != tp || a.echo["Tracestate"] != "vg=1" {
		t.Fatalf("trace context not passed through: %v", a.echo)
	}
}
