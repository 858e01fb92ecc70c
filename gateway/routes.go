package gateway

import (
	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"

	"vendorgate/shared/httpapi"
)

// limitClass says which limit a route counts against.
type limitClass uint8

const (
	classReads limitClass = iota
	classOrders
)

// route is one known route of the vendor API.
type route struct {
	index   int
	method  string
	pattern string
	class   limitClass
	// placesOrder: refused for a suspended account.
	placesOrder bool
	// streams: the answer is a file of any size (a report PDF), streamed
	// from the backend; the other routes' JSON answers are read whole.
	streams bool
}

// routes are the vendor API's routes; the router matches them exactly (no
// redirects, no case folding). Each index is its position, the route's
// metric label index.
var routes = [...]route{
	{index: 0, method: fasthttp.MethodGet, pattern: "/api/vendor/v1/me", class: classReads},
	{index: 1, method: fasthttp.MethodGet, pattern: "/api/vendor/v1/orders", class: classReads},
	{index: 2, method: fasthttp.MethodPost, pattern: "/api/vendor/v1/orders", class: classOrders, placesOrder: true},
	{index: 3, method: fasthttp.MethodGet, pattern: "/api/vendor/v1/orders/{order_id}", class: classReads},
	{index: 4, method: fasthttp.MethodGet, pattern: "/api/vendor/v1/orders/{order_id}/reports/{service}", class: classReads, streams: true},
}

// routeUnmatched is the route label index after the table's: 404 and 405
// answers and answers before routing. The documentation routes follow it
// (docsroutes.go).
const routeUnmatched = len(routes)

// routeLabels are the route label values by index: each route's pattern,
// "unmatched", then the documentation routes' paths.
func routeLabels() []string {
	labels := make([]string, routeUnmatched+1, routeUnmatched+1+len(docRoutes))
	for _, r := range routes {
		labels[r.index] = r.pattern
	}
	labels[routeUnmatched] = "unmatched"
	for _, d := range docRoutes {
		labels = append(labels, d.path)
	}
	return labels
}

// newRouter builds the router: exact matching, and 404/405 answered with the
// envelope by the gateway.
func (g *Gateway) newRouter() *router.Router {
	r := g.routerWith(func(rt *route) fasthttp.RequestHandler {
		return func(ctx *fasthttp.RequestCtx) { g.serveVendor(ctx, rt) }
	})
	g.registerDocs(r)
	return r
}

// routerWith is a router of the vendor routes, each answered by the handler
// serve makes for it, and 404/405 answered by the gateway.
func (g *Gateway) routerWith(serve func(rt *route) fasthttp.RequestHandler) *router.Router {
	r := httpapi.NewRouter(func(ctx *fasthttp.RequestCtx) { g.serveRefusal(ctx, errNotFound) },
		func(ctx *fasthttp.RequestCtx) { g.serveRefusal(ctx, errMethodNotAllowed) })
	for i := range routes {
		rt := &routes[i]
		r.Handle(rt.method, rt.pattern, serve(rt))
	}
	return r
}
