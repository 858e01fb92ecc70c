package gateway

import (
	"fmt"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"go.opentelemetry.io/otel/trace"

	"vendorgate/config"
	"vendorgate/gateway/spans"
	"vendorgate/shared/tracing"
	"vendorgate/shared/wire"
)

// TestTraceContextReachesBackend: with tracing off, a trusted proxy's W3C
// traceparent and tracestate pass through to the backend unchanged, so a
// trace spans both; an untrusted caller's trace id and parent id pass on,
// but not its sampling decision nor its tracestate (the backend follows
// what the gateway sends).
func TestTraceContextReachesBackend(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	t.Run("trusted proxy", func(t *testing.T) {
		b := newTestBackend(t)
		gw := startGateway(t, b, func(o *Options) { o.Config.TrustedProxies = config.List{"127.0.0.1"} })
		key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
		a := do(t, "GET", gw.url+"/api/vendor/v1/me", key, "traceparent", tp, "tracestate", "vg=1")
		if a.status != 200 {
			t.Fatalf("status %d %s", a.status, a.body)
		}
		if a.echo["Traceparent"] != tp || a.echo["Tracestate"] != "vg=1" {
			t.Fatalf("trace context not passed through: %v", a.echo)
		}
	})
	t.Run("untrusted caller", func(t *testing.T) {
		_, gw, key, _ := startWithKey(t)
		for _, c := range []struct{ sent, want string }{
			{tp, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"},
			{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-02"},
			{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"},
			{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0x", ""},
		} {
			a := do(t, "GET", gw.url+"/api/vendor/v1/me", key, "traceparent", c.sent, "tracestate", "vg=1")
			if a.status != 200 {
				t.Fatalf("status %d %s", a.status, a.body)
			}
			if a.echo["Traceparent"] != c.want || a.echo["Tracestate"] != "" {
				t.Errorf("traceparent %s: the backend was sent %q and tracestate %q, want %q and none",
					c.sent, a.echo["Traceparent"], a.echo["Tracestate"], c.want)
			}
		}
	})
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
	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		byName[s.Name()] = s
		if s.SpanContext().TraceID().String() != caller {
			t.Errorf("span %s is in trace %s, not the caller's", s.Name(), s.SpanContext().TraceID())
		}
	}
	server := byName["GET /api/vendor/v1/me"]
	if server == nil || server.Parent().SpanID().String() != "00f067aa0ba902b7" {
		t.Fatalf("no server span continuing the caller's: %v", rec.Ended())
	}
	for _, name := range []string{spans.KeyLookup, spans.Limiter, spans.Backend} {
		if s := byName[name]; s == nil || s.Parent().SpanID() != server.SpanContext().SpanID() {
			t.Errorf("no %s span under the server span", name)
		}
	}
	want := "00-" + caller + "-" + byName[spans.Backend].SpanContext().SpanID().String() + "-01"
	if got := a.echo["Traceparent"]; got != want {
		t.Errorf("the backend was sent traceparent %q, want the backend call's %q", got, want)
	}
}

// callerTraces sends n requests, each with a traceparent of its own whose
// sampled flag is set and whose trace id a caller picked to be sampled by
// any sampler drawing on it (traceidratio samples an id whose low half is
// small), and tracestate when ts is set. It returns the server spans
// recorded, by trace id, and the traceparent and tracestate the backend
// was sent, by trace id.
func callerTraces(t *testing.T, gw *testGateway, key string, rec *tracetest.SpanRecorder, first, n int, ts string) (
	map[string]sdktrace.ReadOnlySpan, map[string][2]string) {
	t.Helper()
	sent := map[string][2]string{}
	for i := first; i < first+n; i++ {
		id := fmt.Sprintf("4bf92f3577b34da6%016x", i)
		extra := []string{"traceparent", "00-" + id + "-00f067aa0ba902b7-01"}
		if ts != "" {
			extra = append(extra, "tracestate", ts)
		}
		a := do(t, "GET", gw.url+"/api/vendor/v1/me", key, extra...)
		if a.status != 200 {
			t.Fatalf("status %d %s", a.status, a.body)
		}
		sent[id] = [2]string{a.echo["Traceparent"], a.echo["Tracestate"]}
	}
	servers := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		if _, ok := sent[s.SpanContext().TraceID().String()]; ok && s.SpanKind() == trace.SpanKindServer {
			servers[s.SpanContext().TraceID().String()] = s
		}
	}
	return servers, sent
}

// TestCallerDoesNotDecideSampling: at a ratio of 1 %, 300 requests whose
// traceparent says sampled are sampled at about 1 % from an untrusted
// caller (the trace id continued, the tracestate dropped), and all of them
// from a trusted proxy; a trusted proxy's 32-member tracestate of 6.1 KB is
// kept only up to tracing.MaxTraceState (its members over 128 characters
// dropped first), on the spans and to the backend.
func TestCallerDoesNotDecideSampling(t *testing.T) {
	const n = 300
	members := make([]string, 32)
	for i := range members {
		members[i] = fmt.Sprintf("v%02d=%s", i, strings.Repeat("x", 120+130*(1-i%2))) // values of 250 and 120 characters

	}
	hugeState := strings.Join(members, ",")
	for _, c := range []struct {
		name    string
		trusted config.List
		maxKept int
	}{
		{"untrusted caller", nil, 20},
		{"trusted proxy", config.List{"127.0.0.1"}, n},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(tracing.NewSampler(0.01, true)))
			b := newTestBackend(t)
			gw := startGateway(t, b, func(o *Options) {
				o.Tracer = tp.Tracer("test")
				o.Config.TrustedProxies = c.trusted
				o.Config.Limits.Vendor.Reads = config.Limit{Rate: 10000, Period: time.Minute}
			})
			key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
			servers, sent := callerTraces(t, gw, key, rec, 1, n, "vg=1")
			t.Logf("%d of %d requests sampled", len(servers), n)
			if len(servers) > c.maxKept || c.trusted != nil && len(servers) != n {
				t.Fatalf("%d of %d requests with a sampled traceparent were sampled at a ratio of 1 %%", len(servers), n)
			}
			for id, s := range servers {
				if _, ok := sent[id]; !ok || s.Parent().SpanID().String() != "00f067aa0ba902b7" {
					t.Fatalf("span %s does not continue the caller's trace", id)
				}
				if want := map[bool]string{true: "vg=1", false: ""}[c.trusted != nil]; s.SpanContext().TraceState().String() != want {
					t.Fatalf("span tracestate %q, want %q", s.SpanContext().TraceState(), want)
				}
			}
			for id, h := range sent {
				if !strings.HasPrefix(h[0], "00-"+id+"-") {
					t.Fatalf("the backend was sent traceparent %q for the caller's trace %s", h[0], id)
				}
			}

			servers, sent = callerTraces(t, gw, key, rec, n+1, 5, hugeState)
			for id, s := range servers {
				if got := s.SpanContext().TraceState().String(); len(got) > tracing.MaxTraceState {
					t.Fatalf("a span of trace %s carries %d bytes of tracestate", id, len(got))
				}
			}
			for _, s := range rec.Ended() {
				if got := s.SpanContext().TraceState().String(); len(got) > tracing.MaxTraceState {
					t.Fatalf("span %s carries %d bytes of tracestate", s.Name(), len(got))
				}
			}
			for id, h := range sent {
				if len(h[1]) > tracing.MaxTraceState || c.trusted != nil && !strings.HasPrefix(h[1], "v01=x") {
					t.Fatalf("trace %s: the backend was sent %d bytes of tracestate %.40q", id, len(h[1]), h[1])
				}
			}
		})
	}
}
