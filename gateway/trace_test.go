package gateway

import (
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"vendorgate/shared/wire"
)

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

// TestSpansOfARequest: with a tracer, a proxied request is a server span
// continuing the caller's trace, with the key lookup, the limiter and the
// backend call as its children; the backend is sent the backend call's
// context, so its span will be that span's child.
func TestSpansOfARequest(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	b := newTestBackend(t)
	gw := startGateway(t, b, func(o *Options) { o.Tracer = tp.Tracer("test") })
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	const caller = "4bf92f3577b34da6a3ce929d0e0e4736"
	a := do(t, "GET", gw.url+"/api/vendor/v1/me", key, "traceparent", "00-"+caller+"-00f067aa0ba902b7-01")
	if a.status != 200 {
		t.Fatalf("status %d %s", a.status, a.body)
	}
	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		spans[s.Name()] = s
		if s.SpanContext().TraceID().String() != caller {
			t.Errorf("span %s is in trace %s, not the caller's", s.Name(), s.SpanContext().TraceID())
		}
	}
	server := spans["GET /api/vendor/v1/me"]
	if server == nil || server.Parent().SpanID().String() != "00f067aa0ba902b7" {
		t.Fatalf("no server span continuing the caller's: %v", rec.Ended())
	}
	for _, name := range []string{spanKeyLookup, spanLimiter, spanBackend} {
		if s := spans[name]; s == nil || s.Parent().SpanID() != server.SpanContext().SpanID() {
			t.Errorf("no %s span under the server span", name)
		}
	}
	want := "00-" + caller + "-" + spans[spanBackend].SpanContext().SpanID().String() + "-01"
	if got := a.echo["Traceparent"]; got != want {
		t.Errorf("the backend was sent traceparent %q, want the backend call's %q", got, want)
	}
}
