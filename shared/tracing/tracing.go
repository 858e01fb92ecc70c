// Package tracing sets up OpenTelemetry tracing for a vendorgate server
// from the standard OTEL_* environment variables, and carries W3C trace
// context over fasthttp's headers (fasthttp has no instrumentation of its
// own: spans are made by hand).
//
// Tracing is on when an OTLP endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT
// or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) or OTEL_TRACES_EXPORTER is otlp,
// and off otherwise (OTEL_TRACES_EXPORTER=none turns it off in any case).
// The rest is read by OpenTelemetry itself, as its autoexport and SDK read
// it: OTEL_EXPORTER_OTLP_PROTOCOL (http/protobuf, the default, or grpc),
// the endpoint and headers, OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES,
// OTEL_BSP_SCHEDULE_DELAY. OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG
// (parentbased_traceidratio with 0.01 samples 1 %) are read here, as the
// SDK reads them, for a sampler that follows a caller's decision only when
// the caller is trusted (Sampler, Extract). These are the one
// exception to config being the one place of each setting: they are the
// OpenTelemetry standard's, shared by every instrumented program.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Tracing is a server's tracer provider. Its zero value is tracing off.
type Tracing struct {
	tp *sdktrace.TracerProvider
}

// Enabled reports whether the environment asks for traces (see the package
// comment); lookup is os.LookupEnv.
func Enabled(lookup func(string) (string, bool)) bool {
	get := func(k string) string { v, _ := lookup(k); return strings.TrimSpace(v) }
	switch strings.ToLower(get("OTEL_TRACES_EXPORTER")) {
	case "none":
		return false
	case "otlp":
		return true
	}
	return get("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Setup starts tracing when the environment asks for it; service is the
// service name unless OTEL_SERVICE_NAME sets another. Off, it returns a
// Tracing whose Tracer is nil and whose Shutdown does nothing. It logs
// "tracing on" with the exporter, protocol, endpoint and sampler, or
// "tracing off"; on, OpenTelemetry's errors go to log (routeErrors), and
// an export failing and recovering is told once each (loggedExporter).
func Setup(ctx context.Context, service string, lookup func(string) (string, bool), log *slog.Logger) (*Tracing, error) {
	if !Enabled(lookup) {
		log.Info("tracing off", "why", "no OTLP endpoint set, or OTEL_TRACES_EXPORTER=none")
		return &Tracing{}, nil
	}
	sampler, err := SamplerFromEnv(lookup)
	if err != nil {
		return nil, fmt.Errorf("tracing: sampler: %w", err)
	}
	routeErrors(log)
	spanExp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: exporter: %w", err)
	}
	ex := ExporterFromEnv(lookup)
	exp := &loggedExporter{SpanExporter: spanExp, log: log, endpoint: ex.Endpoint}
	// Later options win: the environment's service name over the default.
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", service)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	log.Info("tracing on", "exporter", ex.Name, "protocol", ex.Protocol, "endpoint", ex.Endpoint, "sampler", sampler.Description())
	// The batch delay (OTEL_BSP_SCHEDULE_DELAY) is read by the SDK.
	return &Tracing{tp: sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res),
		sdktrace.WithSampler(sampler))}, nil
}

// Tracer is the server's tracer, nil when tracing is off: callers test it
// once, so the request path costs nothing more then.
func (t *Tracing) Tracer(name string) trace.Tracer {
	if t == nil || t.tp == nil {
		return nil
	}
	return t.tp.Tracer(name)
}

// Shutdown flushes the spans not exported yet, within ctx.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil || t.tp == nil {
		return nil
	}
	return t.tp.Shutdown(ctx)
}

// Propagator is W3C trace context (traceparent, tracestate).
var Propagator propagation.TraceContext

// Header is what a fasthttp request or response header offers a carrier.
type Header interface {
	Peek(key string) []byte
	Set(key, value string)
}

// Carrier is a propagation.TextMapCarrier over a fasthttp header.
type Carrier struct{ H Header }

// Get is TextMapCarrier's.
func (c Carrier) Get(key string) string { return string(c.H.Peek(key)) }

// Set is TextMapCarrier's.
func (c Carrier) Set(key, value string) { c.H.Set(key, value) }

// Keys is TextMapCarrier's; TraceContext's Extract does not use it.
func (c Carrier) Keys() []string { return nil }

type requestContextKey struct{}

// Attach keeps c, the context of the request's server span, on the
// request, for the code below the handler that makes spans of its own.
func Attach(rc *fasthttp.RequestCtx, c context.Context) { rc.SetUserValue(requestContextKey{}, c) }

// From is the context Attach kept, context.Background() when none.
func From(rc *fasthttp.RequestCtx) context.Context {
	if c, ok := rc.UserValue(requestContextKey{}).(context.Context); ok {
		return c
	}
	return context.Background()
}
