// Package accesslog writes the gateway's access log: one line per answer
// (line.go: who asked what, the answer, where the time went, the limits'
// outcome, the ids to follow the request elsewhere), and bounds the lines
// of answers with an error code (refusals.go: so many a second in full,
// the rest as summary lines).
package accesslog

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"time"

	"github.com/valyala/fasthttp"

	"vendorgate/gateway/respond"
	"vendorgate/gateway/spans"
	"vendorgate/shared/apierr"
	"vendorgate/shared/logtext"
)

// Entry is what the gateway knows of one answer when its line is written,
// besides what Write takes apart from it: what points into the request's
// own state is passed on its own, so that it stays on the request's stack
// (escape analysis does not tell one field of an Entry from another).
type Entry struct {
	Route  string // the route's label
	Status int
	// Start is when the request had been read, Duration the time to its
	// answer, Upstream the backend call's share of it (0: none).
	Start              time.Time
	Duration, Upstream time.Duration
	// Err is what the gateway answered with itself, nil when the request
	// passed.
	Err             error
	VendorID, KeyID string // "" before the key was resolved
	Client          netip.Addr
	// Limit is the limits' verdict on the request: limited (any kind
	// refused it), allowed, unavailable, or "" when they were not asked
	// (refused before, or no limit); Policy names the row that refused
	// it ("" when none did).
	Limit, Policy string
}

// Write writes the access log line of one answer: who asked what, the
// answer (status, error code, bytes), where the time went (the backend's
// share of it), the limiter's outcome, and the ids to follow the request
// elsewhere (request id in the backend's lines, trace id in the traces).
// It runs only when the line is written: nothing here is paid with the
// access log off.
//
// An answer with an error code is written in full up to
// access_log.refusals_per_second of its code a second, and past that
// counted for a summary line (Refusals).
//
// The line's request id is requestID and its trace id trace's.
func Write(log *slog.Logger, refusals *Refusals, ctx *fasthttp.RequestCtx, ex *Entry,
	requestID []byte, trace *spans.Request) {
	status, d := ex.Status, ex.Duration
	code, cause := errorOf(ctx, ex, status)
	if code != "" && !refusals.Admit(code, ex.Route, status, ex.Start.Add(d)) {
		return
	}
	attrs := make([]slog.Attr, 0, 18)
	attrs = append(attrs,
		slog.String("request_id", string(requestID)),
		slog.String("route", ex.Route),
		slog.String("method", string(ctx.Method())),
		slog.Int("status", status),
		slog.Duration("duration", d))
	if code != "" {
		attrs = append(attrs, slog.String("error", string(code)))
		if cause != nil {
			attrs = append(attrs, slog.String("cause", cause.Error()))
		}
	}
	if ex.Upstream > 0 {
		attrs = append(attrs, slog.Duration("upstream", ex.Upstream))
	}
	if ex.Limit != "" {
		attrs = append(attrs, slog.String("limit", ex.Limit))
	}
	if ex.Policy != "" {
		attrs = append(attrs, slog.String("policy", ex.Policy))
	}
	attrs = append(attrs,
		slog.Int("bytes_in", bodySize(ctx.Request.Header.ContentLength(), ctx.Request.IsBodyStream(), ctx.Request.Body)),
		slog.Int("bytes_out", bodySize(ctx.Response.Header.ContentLength(), ctx.Response.IsBodyStream(), ctx.Response.Body)),
		slog.String("vendor_id", ex.VendorID),
		slog.String("key_id", ex.KeyID),
		slog.String("client", ex.Client.String()))
	if id := trace.TraceID(ctx); id != "" {
		attrs = append(attrs, slog.String("trace_id", id))
	}
	if ua := ctx.UserAgent(); len(ua) > 0 {
		attrs = append(attrs, slog.String("user_agent", logtext.Header(ua)))
	}
	log.LogAttrs(context.Background(), slog.LevelInfo, "request", attrs...)
}

// errorOf is the answer's error code and, for a dependency's failure, its
// cause: the gateway's own refusal as fail resolved it, else the code in a
// backend's error envelope.
func errorOf(ctx *fasthttp.RequestCtx, ex *Entry, status int) (apierr.Code, error) {
	if ex.Err != nil {
		e, _, _ := respond.Resolve(ex.Err)
		var ae *apierr.Error
		if errors.As(ex.Err, &ae) {
			return e.Code, nil
		}
		return e.Code, ex.Err
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
