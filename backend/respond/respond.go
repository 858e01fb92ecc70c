// Package respond writes the backend's answers: JSON bodies, the apierr
// envelope for every error, and the router every listener shares (exact
// matching, envelope 404 and 405, a panic guard).
package respond

import (
	"encoding/json"
	"errors"
	"log/slog"

	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"

	"vendorgate/backend/store"
	"vendorgate/shared/apierr"
	"vendorgate/shared/apikey"
	"vendorgate/shared/httpapi"
	"vendorgate/shared/logtext"
	"vendorgate/shared/wire"
)

// JSON writes v with status. Every backend answer is no-store: order
// results are never cached.
func JSON(ctx *fasthttp.RequestCtx, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		Error(ctx, nil, err)
		return
	}
	httpapi.WriteJSON(ctx, status, body)
}

// errUnavailable answers a request whose database is down.
var errUnavailable = &apierr.Error{Code: apierr.RequestFailed, Message: "the service is unavailable; try again shortly",
	HTTPStatus: fasthttp.StatusServiceUnavailable}

// unavailableRetryAfter is the Retry-After of errUnavailable, the gateway's
// for a backend that is down.
const unavailableRetryAfter = "1"

// Error answers err: an *apierr.Error as itself; a database that is down or
// out of reach (store.Unavailable) as 503 request_failed with Retry-After,
// as the gateway answers a backend that is down; anything else as a 500
// internal_error. The cause of either is logged and never shown.
func Error(ctx *fasthttp.RequestCtx, log *slog.Logger, err error) {
	var ae *apierr.Error
	if !errors.As(err, &ae) {
		if log == nil {
			log = slog.Default()
		}
		if store.Unavailable(err) {
			log.Warn("database unavailable", "method", string(ctx.Method()), "path", logtext.Header(ctx.Path()),
				"request_id", RequestID(ctx), "error", err)
			ctx.Response.Header.Set("Retry-After", unavailableRetryAfter)
			ae = errUnavailable
		} else {
			log.Error("request failed", "method", string(ctx.Method()), "path", logtext.Header(ctx.Path()),
				"request_id", RequestID(ctx), "error", err)
			ae = apierr.New(apierr.InternalError, "internal error")
		}
	}
	httpapi.WriteJSON(ctx, ae.Status(), ae.Body())
}

// RequestID is the request's X-Request-Id for a log line: the gateway's
// id, or what a request that reached the backend some other way sent,
// bounded (logtext.Header); nothing when the value holds anything shaped
// like an API key, alone or inside it (a key pasted in the wrong header).
func RequestID(ctx *fasthttp.RequestCtx) string {
	v := ctx.Request.Header.Peek(wire.HeaderRequestID)
	if start, _ := apikey.FindKeyShape(v); start >= 0 {
		return ""
	}
	return logtext.Header(v)
}

// NewRouter returns a router that matches paths exactly (no redirects),
// answers unknown paths with 404 not_found and known paths with another
// method with 405 method_not_allowed and Allow, and turns a panic into a 500
// envelope. It records the matched route for metrics.
func NewRouter(log *slog.Logger) *router.Router {
	r := httpapi.NewRouter(func(ctx *fasthttp.RequestCtx) {
		Error(ctx, log, apierr.New(apierr.NotFound, "no such path"))
	}, func(ctx *fasthttp.RequestCtx) {
		Error(ctx, log, apierr.New(apierr.MethodNotAllowed, "method %s not allowed here", ctx.Method()))
	})
	r.SaveMatchedRoutePath = true
	r.PanicHandler = func(ctx *fasthttp.RequestCtx, p any) {
		if log == nil {
			log = slog.Default()
		}
		log.Error("panic in handler", "path", logtext.Header(ctx.Path()),
			"request_id", string(ctx.Request.Header.Peek("X-Request-Id")), "panic", p)
		ctx.ResetBody()
		Error(ctx, log, apierr.New(apierr.InternalError, "internal error"))
	}
	return r
}

// ServerErrorHandler maps fasthttp's own refusals to envelopes: a body over
// the size limit is 413 payload_too_large, anything else 400.
func ServerErrorHandler(ctx *fasthttp.RequestCtx, err error) {
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		Error(ctx, nil, apierr.New(apierr.PayloadTooLarge, "the request body is too large"))
		return
	}
	Error(ctx, nil, apierr.New(apierr.ValidationError, "the request could not be read"))
}
