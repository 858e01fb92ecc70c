package httpapi

import (
	"testing"

	"github.com/valyala/fasthttp"
)

func TestDropOptions(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"GET, POST, OPTIONS", "GET, POST"},
		{"OPTIONS, GET", "GET"},
		{"GET,OPTIONS,POST", "GET, POST"},
		{"GET", "GET"},
		{"OPTIONS", ""},
	} {
		var h fasthttp.ResponseHeader
		h.Set(fasthttp.HeaderAllow, tc.in)
		DropOptions(&h)
		if got := string(h.Peek(fasthttp.HeaderAllow)); got != tc.want {
			t.Errorf("DropOptions(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// A 405 from NewRouter's router lists the methods served, never OPTIONS,
// and the handler given answers it.
func TestRouterMethodNotAllowed(t *testing.T) {
	r := NewRouter(func(ctx *fasthttp.RequestCtx) { ctx.SetStatusCode(404) },
		func(ctx *fasthttp.RequestCtx) { WriteJSON(ctx, 405, []byte(`{}`)) })
	r.GET("/x", func(ctx *fasthttp.RequestCtx) {})
	r.POST("/x", func(ctx *fasthttp.RequestCtx) {})
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod(fasthttp.MethodDelete)
	ctx.Request.SetRequestURI("/x")
	r.Handler(&ctx)
	if ctx.Response.StatusCode() != 405 {
		t.Fatalf("status %d, want 405", ctx.Response.StatusCode())
	}
	if got := string(ctx.Response.Header.Peek(fasthttp.HeaderAllow)); got != "GET, POST" {
		t.Errorf("Allow = %q, want %q", got, "GET, POST")
	}
	if got := string(ctx.Response.Header.Peek(fasthttp.HeaderCacheControl)); got != "no-store" {
		t.Errorf("Cache-Control = %q, want no-store", got)
	}
	ctx.Request.Header.SetMethod(fasthttp.MethodGet)
	ctx.Request.SetRequestURI("/x/")
	ctx.Response.Reset()
	r.Handler(&ctx)
	if ctx.Response.StatusCode() != 404 {
		t.Errorf("a trailing slash answered %d, want 404 (exact matching)", ctx.Response.StatusCode())
	}
}
