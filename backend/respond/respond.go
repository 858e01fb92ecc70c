// Package respond writes the backend's answers: JSON bodies, the apierr
// envelope for every error, and the router settings every listener shares
// (exact matching, envelope 404 and 405, a panic guard).
package respond

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"

	"vendorgate/backend/textcheck"
	"vendorgate/shared/apierr"
)

// JSON writes v with status. Every backend answer is no-store: order
// results are never cached.
func JSON(ctx *fasthttp.RequestCtx, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		Error(ctx, nil, err)
		return
	}
	ctx.Response.Header.Set("Cache-Control", "no-store")
	ctx.SetContentType("application/json")
	ctx.SetStatusCode(status)
	ctx.SetBody(body)
}

// Error answers err: an *apierr.Error as itself, anything else as a 500
// internal_error whose cause is logged and never shown.
func Error(ctx *fasthttp.RequestCtx, log *slog.Logger, err error) {
	var ae *apierr.Error
	if !errors.As(err, &ae) {
		if log == nil {
			log = slog.Default()
		}
		log.Error("request failed", "method", string(ctx.Method()), "path", string(ctx.Path()),
			"request_id", string(ctx.Request.Header.Peek("X-Request-Id")), "error", err)
		ae = apierr.New(apierr.InternalError, "internal error")
	}
	ctx.Response.Header.Set("Cache-Control", "no-store")
	ctx.SetContentType("application/json")
	ctx.SetStatusCode(ae.Status())
	ctx.SetBody(ae.Body())
}

// NewRouter returns a router that matches paths exactly (no redirects),
// answers unknown paths with 404 not_found and known paths with another
// method with 405 method_not_allowed and Allow, and turns a panic into a 500
// envelope. It records the matched route for metrics.
func NewRouter(log *slog.Logger) *router.Router {
	r := router.New()
	r.RedirectTrailingSlash = false
	r.RedirectFixedPath = false
	r.HandleOPTIONS = false
	r.HandleMethodNotAllowed = true
	r.SaveMatchedRoutePath = true
	r.NotFound = func(ctx *fasthttp.RequestCtx) {
		Error(ctx, log, apierr.New(apierr.NotFound, "no such path"))
	}
	r.MethodNotAllowed = func(ctx *fasthttp.RequestCtx) {
		// The router has set Allow, always with OPTIONS, which no route
		// here serves: drop it.
		var allow []string
		for _, m := range strings.Split(string(ctx.Response.Header.Peek("Allow")), ",") {
			if m = strings.TrimSpace(m); m != "" && m != fasthttp.MethodOptions {
				allow = append(allow, m)
			}
		}
		ctx.Response.Header.Set("Allow", strings.Join(allow, ", "))
		Error(ctx, log, apierr.New(apierr.MethodNotAllowed, "method %s not allowed here", ctx.Method()))
	}
	r.PanicHandler = func(ctx *fasthttp.RequestCtx, p any) {
		if log == nil {
			log = slog.Default()
		}
		log.Error("panic in handler", "path", string(ctx.Path()), "panic", p)
		ctx.ResetBody()
		Error(ctx, log, apierr.New(apierr.InternalError, "internal error"))
	}
	return r
}

// ServerErrorHandler maps fasthttp's own refusals to envelopes: a body over
// the size limit is 413 payload_too_large, anything else 400.
func ServerErrorHandler(ctx *fasthttp.RequestCtx, err error) {
	if errors.Is(err, fasthttp.ErrBodyTooLarge) || strings.Contains(err.Error(), "body size exceeds") {
		Error(ctx, nil, apierr.New(apierr.PayloadTooLarge, "the request body is too large"))
		return
	}
	Error(ctx, nil, apierr.New(apierr.ValidationError, "the request could not be read"))
}

// RequestContext is the context for the store calls of one request. A
// fasthttp RequestCtx has no deadline and is cancelled at server shutdown,
// which would abort requests the shutdown is meant to drain.
func RequestContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 10*time.Second)
}

// Decode reads a JSON body strictly into v: unknown fields, trailing data
// and a control character in any string are validation errors.
func Decode(body []byte, v any) *apierr.Error {
	if bad := textcheck.ControlChars(body); bad != nil {
		e := apierr.New(apierr.ValidationError, "the request is not valid; see fields")
		e.Fields = bad
		return e
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		e := apierr.New(apierr.ValidationError, "the request body is not valid JSON for this call: %s", jsonProblem(err))
		e.Fields = map[string]string{"body": jsonProblem(err)}
		return e
	}
	if dec.More() {
		e := apierr.New(apierr.ValidationError, "the request body has data after the JSON value")
		e.Fields = map[string]string{"body": "data after the JSON value"}
		return e
	}
	return nil
}

func jsonProblem(err error) string {
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return "unknown field " + f
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return "field " + te.Field + " has the wrong type"
	}
	return "invalid JSON"
}
