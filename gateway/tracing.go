package gateway

import (
	"context"
	"strconv"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"vendorgate/shared/tracing"
)

// requestTrace is one request's spans: the server span and the step in
// progress (key lookup, limiter, backend call). Its zero value is tracing
// off, and then each method is one nil test: the request path allocates
// nothing more.
type requestTrace struct {
	tracer trace.Tracer
	ctx    context.Context // carries the server span
	span   trace.Span
	step   trace.Span
	// stepCtx carries the step's span, for a call the step makes (the
	// key lookup's call to the backend on a cache miss).
	stepCtx context.Context
	// recording is false for a trace not sampled: its steps make no spans
	// (they would be dropped), only its context travels on.
	recording bool
	route     string // the route label, for the span's name and http.route
}

// Span names of the steps.
const (
	spanKeyLookup = "key lookup"
	spanLimiter   = "rate limiter"
	spanBackend   = "backend call"
)

// beginTrace starts the request's server span, continuing the caller's
// trace when it sent a W3C traceparent. Only a trusted proxy's sampling
// decision and tracestate are followed (tracing.Extract): anyone else's
// trace id is continued, sampled by our own ratio. With tracing off the
// caller's trace context goes on to the backend, which follows the
// gateway: the proxy sends an untrusted caller's on unsampled and without
// tracestate (proxy.Identity.KeepTraceContext).
func (g *Gateway) beginTrace(ctx *fasthttp.RequestCtx, ex *exchange) {
	if g.tracer == nil {
		return
	}
	parent := tracing.Extract(&ctx.Request.Header, ex.trustedPeer)
	route := g.labels.of(ex.route)
	c, span := g.tracer.Start(parent, string(ctx.Method())+" "+route,
		trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(ex.start))
	ex.trace = requestTrace{tracer: g.tracer, ctx: c, span: span, recording: span.IsRecording(), route: route}
}

// begin starts a step's span under the server span.
func (t *requestTrace) begin(name string) {
	if !t.recording {
		return
	}
	t.stepCtx, t.step = t.tracer.Start(t.ctx, name, trace.WithSpanKind(trace.SpanKindInternal))
}

// stepContext is the context a call of the step in progress continues: the
// step's span, else (not sampled) the server span's, else nil with tracing
// off.
func (t *requestTrace) stepContext() context.Context {
	if t.step != nil {
		return t.stepCtx
	}
	return t.ctx
}

// beginBackend starts the backend call's span and sends its context to
// the backend in traceparent, so that the backend's span is its child.
func (t *requestTrace) beginBackend(ctx *fasthttp.RequestCtx) {
	if t.span == nil {
		return
	}
	c := t.ctx // not sampled: the backend continues the server span's context
	if t.recording {
		c, t.step = t.tracer.Start(t.ctx, spanBackend, trace.WithSpanKind(trace.SpanKindClient))
	}
	ctx.Request.Header.Del("tracestate") // the propagator sets it again only when there is one
	tracing.Propagator.Inject(c, tracing.Carrier{H: &ctx.Request.Header})
}

// end ends the step in progress; err marks it failed.
func (t *requestTrace) end(err error) {
	if t.step == nil {
		return
	}
	if err != nil {
		t.step.SetStatus(codes.Error, err.Error())
	}
	t.step.End()
	t.step, t.stepCtx = nil, nil
}

// finishTrace ends the server span with what the access log says of the
// request, and returns its trace id when it is sampled (for exemplars).
func (t *requestTrace) finish(ctx *fasthttp.RequestCtx, ex *exchange, status int) (sampledTraceID string) {
	if t.span == nil {
		return ""
	}
	if !t.recording {
		t.span.End()
		return ""
	}
	t.span.SetAttributes(
		attribute.String("http.request.method", string(ctx.Method())),
		attribute.String("http.route", t.route),
		attribute.Int("http.response.status_code", status),
		attribute.String("vendorgate.request_id", string(ex.requestID())),
		attribute.String("vendorgate.vendor_id", ex.vendorID),
		attribute.String("vendorgate.key_id", ex.keyID))
	scheme, version := "http", "1.1"
	if ctx.IsTLS() {
		scheme = "https"
	}
	if !ctx.Request.Header.IsHTTP11() {
		version = "1.0"
	}
	t.span.SetAttributes(attribute.String("url.scheme", scheme), attribute.String("network.protocol.version", version))
	if status >= 500 {
		// The convention's error.type for an answer that is a server error:
		// its status code.
		t.span.SetAttributes(attribute.String("error.type", strconv.Itoa(status)))
		t.span.SetStatus(codes.Error, fasthttp.StatusMessage(status))
	}
	t.span.End()
	if sc := t.span.SpanContext(); sc.IsSampled() {
		return sc.TraceID().String()
	}
	return ""
}

// traceID is the request's trace id for the access log: its span's, else
// the caller's traceparent's.
func (t *requestTrace) traceID(ctx *fasthttp.RequestCtx) string {
	if t.span != nil {
		return t.span.SpanContext().TraceID().String()
	}
	return traceIDOf(ctx)
}
