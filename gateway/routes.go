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
// redirects, no case folding). Indexes are metric label indexes.
var routes = []route{
	{index: 0, method: fasthttp.MethodGet, pattern: "/api/vendor/v1/me", class: classReads},
	{index: 1, method: fasthttp.MethodGet, pattern: "/api/vendor/v1/orders", class: classReads},
	{index: 2, method: fasthttp.MethodPost, pattern: "/api/vendor/v1/orders", class: classOrders, placesOrder: true},
	{index: 3, method: fasthttp.MethodGet, pattern: "/api/vendor/v1/orders/{order_id}", class: classReads},
	{index: 4, method: fasthttp.MethodGet, pattern: "/api/vendor/v1/orders/{order_id}/reports/{service}", class: classReads, streams: true},
}

// Route label indexes beyond the table.
const (
	routeUnmatched = 5
)

// routeLabels are the route label values by index: the pattern, or
// "unmatched" for 404 and 405 answers and answers before routing, then the
// documentation routes (docsroutes.go).
func routeLabels() []string {
	return append([]string{routes[0].pattern, routes[1].pattern, routes[2].pattern, routes[3].pattern, routes[4].pattern, "unmatched"}, docsLabels()...)
}

// newRouter builds the router: exact matching, and 404/405 answered with the
// envelope by the gateway.
func (g *Gateway) newRouter() *router.Router {
	r := httpapi.NewRouter(func(ctx *fasthttp.RequestCtx) { g.serveRefusal(ctx, errNotFound) },
		func(ctx *fasthttp.RequestCtx) { g.serveRefusal(ctx, errMethodNotAllowed) })
	for i := range routes {
		rt := &routes[i]
		r.Handle(rt.method, rt.pattern, func(ctx *fasthttp.RequestCtx) { g.serveVendor(ctx, rt) })
	}
	g.registerDocs(r)
	return r
}
