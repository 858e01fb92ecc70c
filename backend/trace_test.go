package backend

import (
	"fmt"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"vendorgate/shared/tracing"
)

// The backend follows the sampling decision and tracestate of the gateway
// only (the caller with the internal token): at a ratio of 1 %, 300 calls
// whose traceparent says sampled are all sampled from the gateway, about
// 1 % from anyone else, and in both cases the caller's trace id is kept.
func TestOnlyTheGatewayDecidesSampling(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(tracing.NewSampler(0.01, true)))
	h := start(t, func(o *Options) { o.Tracer = tp.Tracer("test") })
	v := h.newVendor("sandbox", "mvr")
	const n = 300
	for _, c := range []struct {
		name    string
		gateway bool
		first   int
	}{{"direct caller", false, 1}, {"gateway", true, n + 1}} {
		t.Run(c.name, func(t *testing.T) {
			ids := map[string]bool{}
			for i := c.first; i < c.first+n; i++ {
				id := fmt.Sprintf("4bf92f3577b34da6%016x", i) // a low half near 0: traceidratio samples it
				ids[id] = true
				hdr := map[string]string{"traceparent": "00-" + id + "-00f067aa0ba902b7-01", "tracestate": "vg=1"}
				var r resp
				if c.gateway {
					r = h.vendorCall(v, "GET", "/api/vendor/v1/me", hdr, "")
				} else {
					r = h.do("GET", h.api+"/api/vendor/v1/me", hdr, "")
				}
				if want := map[bool]int{true: 200, false: 401}[c.gateway]; r.status != want {
					t.Fatalf("%d %s, want %d", r.status, r.body, want)
				}
			}
			sampled := 0
			for _, s := range rec.Ended() {
				id := s.SpanContext().TraceID().String()
				if s.SpanKind() != trace.SpanKindServer || !ids[id] {
					continue
				}
				sampled++
				if s.Parent().SpanID().String() != "00f067aa0ba902b7" {
					t.Fatalf("span of trace %s does not continue the caller's", id)
				}
				if want := map[bool]string{true: "vg=1"}[c.gateway]; s.SpanContext().TraceState().String() != want {
					t.Fatalf("tracestate %q, want %q", s.SpanContext().TraceState(), want)
				}
			}
			t.Logf("%d of %d sampled", sampled, n)
			if c.gateway && sampled != n || !c.gateway && sampled > 20 {
				t.Fatalf("%d of %d calls with a sampled traceparent sampled at a ratio of 1 %%", sampled, n)
			}
		})
	}
}
