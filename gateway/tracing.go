package gateway

import (
	"context"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"vendorgate/gateway/clientip"
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
// gateway: an untrusted caller's is sent on unsampled and without
// tracestate (untrustedTraceContext).
func (g *Gateway) beginTrace(ctx *fasthttp.RequestCtx, sn *snapshot, ex *exchange) {
	if g.tracer == nil {
		if len(ctx.Request.Header.Peek("traceparent")) > 0 && !sn.clientIP.Trusts(clientip.Peer(ctx)) {
			untrustedTraceContext(&ctx.Request.Header)
		}
		return
	}
	parent := tracing.Extract(&ctx.Request.Header, sn.clientIP.Trusts(clientip.Peer(ctx)))
	route := g.labels.of(ex.route)
	c, span := g.tracer.Start(parent, string(ctx.Method())+" "+route,
		trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(ex.start))
	ex.trace = requestTrace{tracer: g.tracer, ctx: c, span: span, recording: span.IsRecording(), route: route}
}

// untrustedTraceContext leaves of an untrusted caller's trace context only
// its ids: the sampled flag is cleared and tracestate removed, so that the
// backend, which follows what the gateway sends, does not take the
// caller's decision for the gateway's. A traceparent that is not well
// formed is removed (the backend would ignore it). Without allocating.
func untrustedTraceContext(h *fasthttp.RequestHeader) {
	tp := h.Peek("traceparent")
	h.Del("tracestate")
	const size = 55 // version-traceid-parentid-flags
	if len(tp) != size || tp[2] != '-' || tp[35] != '-' || tp[52] != '-' || !isHex(tp[:2]) || !isHex(tp[53:]) {
		h.Del("traceparent")
		return
	}
	var b [size]byte
	copy(b[:], tp)
	flags := unhex(b[53])<<4 | unhex(b[54])
	flags &^= byte(trace.FlagsSampled)
	const digits = "0123456789abcdef"
	b[53], b[54] = digits[flags>>4], digits[flags&0xf]
	h.SetBytesV("traceparent", b[:])
}

func isHex(b []byte) bool {
	for _, c := range b {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func unhex(c byte) byte {
	if c >= 'a' {
		return c - 'a' + 10
	}
	return c - '0'
}

// begin starts a step's span under the server span.
func (t *requestTrace) begin(name string) {
	if !t.recording {
		return
	}
	_, t.step = t.tracer.Start(t.ctx, name, trace.WithSpanKind(trace.SpanKindInternal))
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
	t.step = nil
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
	if status >= 500 {
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
