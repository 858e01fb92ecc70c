package gateway

import (
	"strconv"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"vendorgate/shared/wire"
)

// TestServerSpanConventionAttributes: the server span carries the HTTP
// server convention's url.scheme and network.protocol.version, and
// error.type (the status code) on a 5xx answer only.
func TestServerSpanConventionAttributes(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	b := newTestBackend(t)
	gw := startGateway(t, b, func(o *Options) { o.Tracer = tp.Tracer("test") })
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	if a := do(t, "GET", gw.url+"/api/vendor/v1/me", key); a.status != 200 {
		t.Fatalf("me: %d %s", a.status, a.body)
	}
	b.stop()
	failed := do(t, "GET", gw.url+"/api/vendor/v1/orders/abc", key)
	if failed.status < 500 {
		t.Fatalf("with the backend stopped: %d, want a 5xx", failed.status)
	}
	servers := map[string]map[string]string{}
	for _, s := range rec.Ended() {
		if s.SpanKind() != trace.SpanKindServer {
			continue
		}
		attrs := map[string]string{}
		for _, kv := range s.Attributes() {
			attrs[string(kv.Key)] = kv.Value.String()
		}
		servers[s.Name()] = attrs
	}
	ok, bad := servers["GET /api/vendor/v1/me"], servers["GET /api/vendor/v1/orders/{order_id}"]
	if ok == nil || bad == nil {
		t.Fatalf("server spans: %v", servers)
	}
	for name, attrs := range servers {
		if attrs["url.scheme"] != "http" || attrs["network.protocol.version"] != "1.1" {
			t.Errorf("%s: url.scheme %q, network.protocol.version %q; want http, 1.1", name, attrs["url.scheme"], attrs["network.protocol.version"])
		}
	}
	if _, has := ok["error.type"]; has {
		t.Errorf("a 200's span has error.type %q", ok["error.type"])
	}
	if bad["error.type"] != strconv.Itoa(failed.status) {
		t.Errorf("a %d's span has error.type %q", failed.status, bad["error.type"])
	}
}
