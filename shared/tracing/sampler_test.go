package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// The sampler is named by the same variables and values as the SDK's; an
// unknown one or a ratio out of range is an error.
func TestSamplerFromEnv(t *testing.T) {
	for _, c := range []struct {
		env         []string
		ratio       float64
		parentBased bool
		err         bool
	}{
		{nil, 1, true, false},
		{[]string{"OTEL_TRACES_SAMPLER", "always_on"}, 1, false, false},
		{[]string{"OTEL_TRACES_SAMPLER", "always_off"}, 0, false, false},
		{[]string{"OTEL_TRACES_SAMPLER", "parentbased_always_off"}, 0, true, false},
		{[]string{"OTEL_TRACES_SAMPLER", "traceidratio", "OTEL_TRACES_SAMPLER_ARG", "0.25"}, 0.25, false, false},
		{[]string{"OTEL_TRACES_SAMPLER", " ParentBased_TraceIDRatio ", "OTEL_TRACES_SAMPLER_ARG", "0.01"}, 0.01, true, false},
		{[]string{"OTEL_TRACES_SAMPLER", "parentbased_traceidratio"}, 1, true, false},
		{[]string{"OTEL_TRACES_SAMPLER", "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG", "1.5"}, 0, false, true},
		{[]string{"OTEL_TRACES_SAMPLER", "traceidratio", "OTEL_TRACES_SAMPLER_ARG", "x"}, 0, false, true},
		{[]string{"OTEL_TRACES_SAMPLER", "jaeger_remote"}, 0, false, true},
	} {
		s, err := SamplerFromEnv(env(c.env...))
		if (err != nil) != c.err || err == nil && (s.ratio != c.ratio || s.parentBased != c.parentBased) {
			t.Errorf("%v: %+v %v, want ratio %v parent-based %v error %v", c.env, s, err, c.ratio, c.parentBased, c.err)
		}
	}
}

func remoteParent(t *testing.T, traceID string, sampled, trusted bool, ts string) context.Context {
	t.Helper()
	var h fasthttp.RequestHeader
	flags := "00"
	if sampled {
		flags = "01"
	}
	h.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-"+flags)
	if ts != "" {
		h.Set("tracestate", ts)
	}
	c := Extract(&h, trusted)
	if !trace.SpanContextFromContext(c).IsValid() {
		t.Fatal("no parent extracted")
	}
	return c
}

// An untrusted caller's sampled flag is not followed, even with a trace id
// a draw on the id would always sample; its tracestate is dropped. A
// trusted caller's decision and tracestate are followed, a local parent's
// decision too.
func TestSamplerTrustsOnlyTrustedCallers(t *testing.T) {
	s := NewSampler(0.01, true)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(s))
	tr := tp.Tracer("t")
	sampled := 0
	const n = 2000
	for i := range n {
		id := fmt.Sprintf("4bf92f3577b34da6%016x", i) // a low half near 0: traceidratio samples it
		_, span := tr.Start(remoteParent(t, id, true, false, "vg=1"), "s")
		sc := span.SpanContext()
		if sc.TraceID().String() != id {
			t.Fatalf("trace id %s not continued: %s", id, sc.TraceID())
		}
		if sc.TraceState().Len() != 0 {
			t.Fatalf("an untrusted tracestate kept: %s", sc.TraceState())
		}
		if sc.IsSampled() {
			sampled++
		}
		span.End()
	}
	t.Logf("untrusted: %d of %d sampled at 1 %%", sampled, n)
	if sampled > 60 {
		t.Fatalf("untrusted: %d of %d sampled at 1 %%", sampled, n)
	}

	for _, want := range []bool{true, false} {
		c, span := tr.Start(remoteParent(t, "4bf92f3577b34da6a3ce929d0e0e4736", want, true, "vg=1"), "s")
		if span.SpanContext().IsSampled() != want || span.SpanContext().TraceState().String() != "vg=1" {
			t.Errorf("trusted, sampled %v: got %v %q", want, span.SpanContext().IsSampled(), span.SpanContext().TraceState())
		}
		_, child := tr.Start(c, "child")
		if child.SpanContext().IsSampled() != want {
			t.Errorf("a child of a span sampled %v: %v", want, child.SpanContext().IsSampled())
		}
	}
	if _, span := tr.Start(context.Background(), "root"); !span.SpanContext().IsValid() {
		t.Error("no root span")
	}
}

// A tracestate within MaxTraceState is kept as it is; a larger one loses
// its members over 128 characters first, then members from the end.
func TestBoundTraceState(t *testing.T) {
	small, _ := trace.ParseTraceState("a=1,b=2")
	if got := BoundTraceState(small); got.String() != "a=1,b=2" {
		t.Errorf("small: %q", got)
	}
	var members []string
	for i := range 32 {
		members = append(members, fmt.Sprintf("k%02d=%s", i, strings.Repeat("v", 120+130*(1-i%2))))
	}
	big, err := trace.ParseTraceState(strings.Join(members, ","))
	if err != nil {
		t.Fatal(err)
	}
	got := BoundTraceState(big).String()
	want := strings.Join([]string{members[1], members[3], members[5], members[7]}, ",") // 4 x 124 + 3 commas
	if got != want || len(got) > MaxTraceState {
		t.Errorf("bounded to %d bytes %.60q..., want %d bytes", len(got), got, len(want))
	}
}

// A sampler the environment names but vendorgate cannot honour stops the
// server at start with the variable named, rather than a silent default.
func TestSetupRefusesUnknownSampler(t *testing.T) {
	_, err := Setup(context.Background(), "svc", env("OTEL_TRACES_EXPORTER", "otlp", "OTEL_TRACES_SAMPLER", "jaeger_remote"),
		slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "OTEL_TRACES_SAMPLER") {
		t.Fatalf("Setup with an unknown sampler: %v", err)
	}
}
