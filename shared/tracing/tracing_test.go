package tracing

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// Tracing is on with an OTLP endpoint or OTEL_TRACES_EXPORTER=otlp, off
// otherwise, and none turns it off whatever else is set.
func TestEnabled(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want bool
	}{
		{nil, false},
		{[]string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"}, true},
		{[]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:4318/v1/traces"}, true},
		{[]string{"OTEL_TRACES_EXPORTER", "otlp"}, true},
		{[]string{"OTEL_TRACES_EXPORTER", "none", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"}, false},
		{[]string{"OTEL_SERVICE_NAME", "x", "OTEL_TRACES_SAMPLER", "always_on"}, false},
	} {
		if got := Enabled(env(tc.env...)); got != tc.want {
			t.Errorf("Enabled(%v) = %v, want %v", tc.env, got, tc.want)
		}
	}
}

// Off, Setup starts nothing, hands out a nil tracer and logs "tracing off".
func TestSetupOff(t *testing.T) {
	var logs strings.Builder
	tr, err := Setup(context.Background(), "svc", env(), slog.New(slog.NewJSONHandler(&logs, nil)))
	if err != nil || tr.Tracer("x") != nil || tr.Shutdown(context.Background()) != nil {
		t.Fatalf("off: %v %v", tr.Tracer("x"), err)
	}
	if !strings.Contains(logs.String(), `"msg":"tracing off"`) {
		t.Errorf("no tracing off line: %s", logs.String())
	}
}

// The start line names the exporter, protocol and endpoint the
// environment sets, as OpenTelemetry's exporters read them, without a
// password in the endpoint.
func TestExporterFromEnv(t *testing.T) {
	for _, c := range []struct {
		env  []string
		want Exporter
	}{
		{[]string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"}, Exporter{"otlp", "http/protobuf", "http://collector:4318/v1/traces"}},
		{[]string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://u:secret@tr:4318/x"},
			Exporter{"otlp", "http/protobuf", "http://tr:4318/x"}},
		{[]string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"}, Exporter{"otlp", "grpc", "http://collector:4317"}},
		{[]string{"OTEL_TRACES_EXPORTER", "otlp"}, Exporter{"otlp", "http/protobuf", "https://localhost:4318/v1/traces"}},
	} {
		if got := ExporterFromEnv(env(c.env...)); got != c.want {
			t.Errorf("%v: %+v, want %+v", c.env, got, c.want)
		}
	}
}

// The carrier reads and writes a fasthttp header for W3C trace context.
func TestCarrierRoundTrip(t *testing.T) {
	var in fasthttp.RequestHeader
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	in.Set("traceparent", tp)
	ctx := Propagator.Extract(context.Background(), Carrier{H: &in})
	var out fasthttp.RequestHeader
	Propagator.Inject(ctx, Carrier{H: &out})
	if got := string(out.Peek("traceparent")); got != tp {
		t.Fatalf("traceparent %q, want %q", got, tp)
	}
}
