// Package httpapi holds what the gateway and the backend do alike when
// they answer over HTTP: a JSON body sent no-store, and the router settings
// both listeners share (exact matching, no OPTIONS, 405 with an Allow that
// lists only the methods served).
package httpapi

import (
	"bytes"

	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"

	"vendorgate/shared/apierr"
)

// WriteJSON replaces the response body with body, a JSON document sent with
// status and Cache-Control: no-store (an API answer is never cached).
func WriteJSON(ctx *fasthttp.RequestCtx, status int, body []byte) {
	ctx.Response.ResetBody()
	ctx.Response.Header.Set(fasthttp.HeaderCacheControl, "no-store")
	ctx.SetContentType("application/json")
	ctx.SetStatusCode(status)
	ctx.SetBody(body)
}

// NewRouter returns a router that matches paths exactly (no redirects, no
// case folding) and serves no OPTIONS. A path with no route goes to
// notFound; a known path with another method to methodNotAllowed, with the
// router's Allow header already set and OPTIONS dropped from it.
func NewRouter(notFound, methodNotAllowed fasthttp.RequestHandler) *router.Router {
	r := router.New()
	r.RedirectTrailingSlash = false
	r.RedirectFixedPath = false
	r.HandleOPTIONS = false
	r.HandleMethodNotAllowed = true
	r.NotFound = notFound
	r.MethodNotAllowed = func(ctx *fasthttp.RequestCtx) {
		DropOptions(&ctx.Response.Header)
		methodNotAllowed(ctx)
	}
	return r
}

// DropOptions removes OPTIONS from the Allow header: the router always lists
// it, and no route here serves it.
func DropOptions(h *fasthttp.ResponseHeader) {
	allow := h.Peek(fasthttp.HeaderAllow)
	out := make([]byte, 0, len(allow))
	for m := range bytes.SplitSeq(allow, []byte{','}) {
		if m = bytes.TrimSpace(m); len(m) == 0 || string(m) == fasthttp.MethodOptions {
			continue
		}
		if len(out) > 0 {
			out = append(out, ", "...)
		}
		out = append(out, m...)
	}
	h.SetBytesV(fasthttp.HeaderAllow, out)
}

// RefuseAdminToken answers a request to an admin listener without its
// token, as every admin listener of both binaries does: 401
// invalid_api_key (the same code for the same mistake wherever it is
// made), WWW-Authenticate naming the listener's realm, and a message that
// tells "required" (none sent) from "refused" (another sent), naming the
// setting that holds the right one, so that an operator with a stale or
// mistyped token is not told to send one.
func RefuseAdminToken(ctx *fasthttp.RequestCtx, realm, setting string) {
	ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="`+realm+`"`)
	msg := "admin token required: send Authorization: Bearer <" + setting + ">"
	if len(ctx.Request.Header.Peek("Authorization")) > 0 {
		msg = "admin token refused: it is not " + setting
	}
	e := apierr.New(apierr.InvalidAPIKey, "%s", msg)
	WriteJSON(ctx, e.Status(), e.Body())
}
