// Package httpapi holds what the gateway and the backend do alike when
// they answer over HTTP: a JSON body sent no-store, and the router settings
// both listeners share (exact matching, no OPTIONS, 405 with an Allow that
// lists only the methods served).
package httpapi

import (
	"bytes"

	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"
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
