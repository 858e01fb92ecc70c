// Package spans makes one request's spans at the gateway: the server span
// (continuing a caller's W3C trace context as shared/tracing allows) and
// one span per step the request flow takes (key lookup, rate limiter,
// backend call), and passes the trace context on to the backend. A
// Request's zero value is tracing off, and then each method is one nil
// test: the request path allocates nothing more. The trace id the access
// log writes is Request.TraceID's.
package spans

import (
	"context"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"vendorgate/shared/tracing"
)

// Request is one request's spans: the server span and the step in
// progress (key lookup, limiter, backend call). Its zero value is tracing
// off, and then each method is one nil test: the request path allocates
// nothing more.
type Request struct {
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
	KeyLookup = "key lookup"
	Limiter   = "rate limiter"
	Backend   = "backend call"
)

// Begin starts the request's server span with tracer (nil: tracing off,
// nothing is done), named by its method and route and begun at start,
// continuing the caller's trace when it sent a W3C traceparent. Only a trusted proxy's sampling
// decision and tracestate are followed (tracing.Extract): anyone else's
// trace id is continued, sampled by our own ratio. With tracing off the
// caller's trace context goes on to the backend, which follows the
// gateway: the proxy sends an untrusted caller's on unsampled and without
// tracestate (proxy.Identity.KeepTraceContext).
func (t *Request) Begin(tracer trace.Tracer, ctx *fasthttp.RequestCtx, trustedPeer bool, route string, start time.Time) {
	if tracer == nil {
		return
	}
	parent := tracing.Extract(&ctx.Request.Header, trustedPeer)
	c, span := tracer.Start(parent, string(ctx.Method())+" "+route,
		trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(start))
	*t = Request{tracer: tracer, ctx: c, span: span, recording: span.IsRecording(), route: route}
}

// Active reports whether the request has a server span (tracing is on).
func (t *Request) Active() bool { return t.span != nil }

// Begin starts a step's span under the server span.
func (t *Request) BeginStep(name string) {
	if !t.recording {
		return
	}
	t.stepCtx, t.step = t.tracer.Start(t.ctx, name, trace.WithSpanKind(trace.SpanKindInternal))
}

// StepContext is the context a call of the step in progress continues: the
// step's span, else (not sampled) the server span's, else nil with tracing
// off.
func (t *Request) StepContext() context.Context {
	if t.step != nil {
		return t.stepCtx
	}
	return t.ctx
}

// BeginBackend starts the backend call's span and sends its context to
// the backend in traceparent, so that the backend's span is its child.
func (t *Request) BeginBackend(ctx *fasthttp.RequestCtx) {
	if t.span == nil {
		return
	}
	c := t.ctx // not sampled: the backend continues the server span's context
	if t.recording {
		c, t.step = t.tracer.Start(t.ctx, Backend, trace.WithSpanKind(trace.SpanKindClient))
	}
	ctx.Request.Header.Del("tracestate") // the propagator sets it again only when there is one
	tracing.Propagator.Inject(c, tracing.Carrier{H: &ctx.Request.Header})
}

// End ends the step in progress; err marks it failed.
func (t *Request) End(err error) {
	if t.step == nil {
		return
	}
	if err != nil {
		t.step.SetStatus(codes.Error, err.Error())
	}
	t.step.End()
	t.step, t.stepCtx = nil, nil
}

// Finish ends the server span with what the access log says of the
// request (its status, request id, vendor and key), and returns its trace
// id when it is sampled (for exemplars).
func (t *Request) Finish(ctx *fasthttp.RequestCtx, status int, requestID []byte, vendorID, keyID string) (sampledTraceID string) {
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
		attribute.String("vendorgate.request_id", string(requestID)),
		attribute.String("vendorgate.vendor_id", vendorID),
		attribute.String("vendorgate.key_id", keyID))
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

// TraceID is the request's trace id for the access log: its span's, else
// the caller's traceparent's.
func (t *Request) TraceID(ctx *fasthttp.RequestCtx) string {
	if t.span != nil {
		return t.span.SpanContext().TraceID().String()
	}
	return traceIDOf(ctx)
}

// traceIDOf is the trace id of the request's W3C traceparent
// (version-traceid-parentid-flags), "" when there is none or it is not
// well formed.
func traceIDOf(ctx *fasthttp.RequestCtx) string {
	tp := ctx.Request.Header.Peek("traceparent")
	if len(tp) < 55 || tp[2] != '-' || tp[35] != '-' {
		return ""
	}
	id := tp[3:35]
	for _, c := range id {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return ""
		}
	}
	if string(id) == "00000000000000000000000000000000" {
		return ""
	}
	return string(id)
}
