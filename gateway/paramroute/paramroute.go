// Package paramroute matches the vendor routes whose patterns have
// parameters (/orders/{order_id}) ahead of the router, without the
// router's copies of the parameters' values: New splits a pattern, Routes'
// Handler finds the route a request's method and path match exactly. One
// file: paramroute.go.
package paramroute

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/valyala/fasthttp"
)

// Route is a vendor route whose pattern has parameters
// (/orders/{order_id}), matched ahead of the router: for each
// parameter fasthttp/router copies the path's value into the request's
// user values, three allocations a request that nothing here reads (the
// backend gets the path). A path the routes here do not match exactly goes
// on to the router, which has every route: 404, 405 and Allow stay its
// answers.
type Route struct {
	method string
	// prefix is the pattern up to its first parameter, which starts a
	// segment ("/api/vendor/v1/orders/"); segs the rest split at '/', ""
	// where a parameter stands.
	prefix string
	segs   []string
	h      fasthttp.RequestHandler
}

// Routes are the vendor routes with parameters, as the public handler
// matches them.
type Routes []Route

// New is the route of method and pattern answered by h: it splits pattern
// at its first parameter; ok is false for a pattern without one. A
// parameter is a whole segment ("{name}"), as the vendor routes write
// them; a pattern that is not so panics (a route table the matcher would
// misread).
func New(method, pattern string, h fasthttp.RequestHandler) (Route, bool) {
	i := strings.IndexByte(pattern, '{')
	if i < 0 {
		return Route{}, false
	}
	p := Route{method: method, prefix: pattern[:i], h: h}
	if !strings.HasSuffix(p.prefix, "/") {
		panic(fmt.Sprintf("route %s: a parameter that does not start a segment", pattern))
	}
	for _, seg := range strings.Split(pattern[i:], "/") {
		switch {
		case strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") && strings.Count(seg, "{") == 1:
			seg = ""
		case seg == "" || strings.ContainsAny(seg, "{}"):
			panic(fmt.Sprintf("route %s: a segment %q the parameter matcher does not read", pattern, seg))
		}
		p.segs = append(p.segs, seg)
	}
	return p, true
}

// Handler is the handler of the route the request's method and path (as
// sent, not decoded: the router's PathOriginal) match exactly, nil for
// none.
func (ps Routes) Handler(ctx *fasthttp.RequestCtx) fasthttp.RequestHandler {
	if len(ps) == 0 {
		return nil
	}
	method, path := ctx.Request.Header.Method(), ctx.Request.URI().PathOriginal()
	for i := range ps {
		if p := &ps[i]; string(method) == p.method && p.match(path) {
			return p.h
		}
	}
	return nil
}

// match reports whether path is the prefix, then a non-empty segment for
// each parameter and the pattern's own segments between them, and nothing
// more.
func (p *Route) match(path []byte) bool {
	if len(path) < len(p.prefix) || string(path[:len(p.prefix)]) != p.prefix {
		return false
	}
	rest := path[len(p.prefix):]
	for i, want := range p.segs {
		if i > 0 {
			if len(rest) == 0 || rest[0] != '/' {
				return false
			}
			rest = rest[1:]
		}
		end := bytes.IndexByte(rest, '/')
		if end < 0 {
			end = len(rest)
		}
		if seg := rest[:end]; len(seg) == 0 || want != "" && string(seg) != want {
			return false
		}
		rest = rest[end:]
	}
	return len(rest) == 0
}
