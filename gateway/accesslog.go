package gateway

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/valyala/fasthttp"

	"vendorgate/gateway/admission"
	"vendorgate/gateway/limit"
	"vendorgate/gateway/respond"
	"vendorgate/shared/apierr"
	"vendorgate/shared/logtext"
)

// logRequest writes the access log line of one answer: who asked what, the
// answer (status, error code, bytes), where the time went (the backend's
// share of it), the limiter's outcome, and the ids to follow the request
// elsewhere (request id in the backend's lines, trace id in the traces).
// It runs only when the line is written: nothing here is paid with the
// access log off.
//
// An answer with an error code is written in full up to
// access_log.refusals_per_second of its code a second, and past that
// counted for a summary line (refusalLog).
func (g *Gateway) logRequest(ctx *fasthttp.RequestCtx, ex *exchange, status int, d time.Duration) {
	code, cause := errorOf(ctx, ex, status)
	if code != "" && !g.refusals.admit(code, g.labels.of(ex.route), status, ex.start.Add(d)) {
		return
	}
	attrs := make([]slog.Attr, 0, 18)
	attrs = append(attrs,
		slog.String("request_id", string(ex.requestID())),
		slog.String("route", g.labels.of(ex.route)),
		slog.String("method", string(ctx.Method())),
		slog.Int("status", status),
		slog.Duration("duration", d))
	if code != "" {
		attrs = append(attrs, slog.String("error", string(code)))
		if cause != nil {
			attrs = append(attrs, slog.String("cause", cause.Error()))
		}
	}
	if ex.upstream > 0 {
		attrs = append(attrs, slog.Duration("upstream", ex.upstream))
	}
	if o := limiterOutcome(ex); o != "" {
		attrs = append(attrs, slog.String("limit", o))
	}
	if r := &ex.adm.Refused; r.Kind != admission.None {
		attrs = append(attrs, slog.String("policy", r.Name))
	}
	attrs = append(attrs,
		slog.Int("bytes_in", bodySize(ctx.Request.Header.ContentLength(), ctx.Request.IsBodyStream(), ctx.Request.Body)),
		slog.Int("bytes_out", bodySize(ctx.Response.Header.ContentLength(), ctx.Response.IsBodyStream(), ctx.Response.Body)),
		slog.String("vendor_id", ex.vendorID),
		slog.String("key_id", ex.keyID),
		slog.String("client", ex.client.String()))
	if id := ex.trace.TraceID(ctx); id != "" {
		attrs = append(attrs, slog.String("trace_id", id))
	}
	if ua := ctx.UserAgent(); len(ua) > 0 {
		attrs = append(attrs, slog.String("user_agent", logtext.Header(ua)))
	}
	g.log.LogAttrs(context.Background(), slog.LevelInfo, "request", attrs...)
}

// errorOf is the answer's error code and, for a dependency's failure, its
// cause: the gateway's own refusal as fail resolved it, else the code in a
// backend's error envelope.
func errorOf(ctx *fasthttp.RequestCtx, ex *exchange, status int) (apierr.Code, error) {
	if ex.err != nil {
		e, _, _ := respond.Resolve(ex.err)
		var ae *apierr.Error
		if errors.As(ex.err, &ae) {
			return e.Code, nil
		}
		return e.Code, ex.err
	}
	if status < 400 || ctx.Response.IsBodyStream() {
		return "", nil
	}
	return codeInEnvelope(ctx.Response.Body()), nil
}

// codeInEnvelope finds error.code in a backend's envelope without decoding
// the whole body (the envelope's first string field; the backend writes
// it compactly).
func codeInEnvelope(body []byte) apierr.Code {
	const key = `"code":"`
	i := bytes.Index(body, []byte(key))
	if i < 0 {
		return ""
	}
	rest := body[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 || j > 64 {
		return ""
	}
	return apierr.Code(rest[:j])
}

// limiterOutcome is the limits' verdict on the request: limited (any kind
// refused it), allowed, unavailable, or "" when they were not asked
// (refused before, or no limit).
func limiterOutcome(ex *exchange) string {
	if o := ex.adm.Outcome(); o != "" {
		return o
	}
	if ex.err != nil && errors.Is(ex.err, limit.ErrUnavailable) {
		return "unavailable"
	}
	return ""
}

// bodySize is a body's length: the announced Content-Length, else the body
// read, else -1 for a stream of unknown length (a body not buffered is
// never read here).
func bodySize(contentLength int, stream bool, body func() []byte) int {
	switch {
	case contentLength >= 0:
		return contentLength
	case stream:
		return -1
	}
	return len(body())
}
