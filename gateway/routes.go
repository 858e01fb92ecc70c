package gateway

import (
	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"

	"vendorgate/config"
	"vendorgate/shared/httpapi"
)

// The classes of routes a limit policy can count (a row's class in
// config.Limits), and how the docs page names each. A route counts against
// every policy of each class it lists.
const (
	classReads  = config.ClassReads
	classOrders = config.ClassOrders
	// classReports is report downloads; no built-in policy counts it.
	classReports = "reports"
)

var classDescriptions = map[string]string{
	classReads:   "GET routes under /api/vendor/",
	classOrders:  "POST /api/vendor/v1/orders",
	classReports: "GET /api/vendor/v1/orders/{order_id}/reports/{service}",
}

// route is one known route of the vendor API.
type route struct {
	index   int
	method  string
	pattern string
	// counts are the classes of limit policies the route counts against.
	counts []string
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
	{index: 0, method: fasthttp.MethodGet, pattern: "/api/vendor/v1/me", counts: []string{classReads}},
	{index: 1, method: fasthttp.MethodGet, pattern: "/api/vendor/v1/orders", counts: []string{classReads}},
	{index: 2, method: fasthttp.MethodPost, pattern: "/api/vendor/v1/orders", counts: []string{classOrders}, placesOrder: true},
	{index: 3, method: fasthttp.MethodGet, pattern: "/api/vendor/v1/orders/{order_id}", counts: []string{classReads}},
	{index: 4, method: fasthttp.MethodGet, pattern: "/api/vendor/v1/orders/{order_id}/reports/{service}", counts: []string{classReads, classReports}, streams: true},
}

// routeClasses are the classes each route counts, by route index, for
// the policy table.
func routeClasses() [][]string {
	cs := make([][]string, len(routes))
	for _, r := range routes {
		cs[r.index] = r.counts
	}
	return cs
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
	r := httpapi.NewRouter(func(ctx *fasthttp.RequestCtx) { g.serveRefusal(ctx, errNotFound) },
		func(ctx *fasthttp.RequestCtx) { g.serveRefusal(ctx, errMethodNotAllowed) })
	for i := range routes {
		rt := &routes[i]
		r.Handle(rt.method, rt.pattern, func(ctx *fasthttp.RequestCtx) { g.serveVendor(ctx, rt) })
	}
	g.registerDocs(r)
	return r
}
