package gateway

import (
	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"

	"vendorgate/config"
	"vendorgate/gateway/docs"
	"vendorgate/gateway/paramroute"
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
	method  string
	pattern string
	// counts are the classes of limit policies the route counts against.
	counts []string
	// placesOrder: refused for a suspended account.
	placesOrder bool
	// streams: the answer is a file of any size (a report PDF), streamed
	// from the backend; the other routes' JSON answers are read whole.
	streams bool

	// Set by newRouter for the gateway's own copy of the route: its row in
	// the policy plans (its place in routes) and its route label.
	plan, label int
}

// routes are the vendor API's routes; the router matches them exactly (no
// redirects, no case folding).
var routes = [...]route{
	{method: fasthttp.MethodGet, pattern: "/api/vendor/v1/me", counts: []string{classReads}},
	{method: fasthttp.MethodGet, pattern: "/api/vendor/v1/orders", counts: []string{classReads}},
	{method: fasthttp.MethodPost, pattern: "/api/vendor/v1/orders", counts: []string{classOrders}, placesOrder: true},
	{method: fasthttp.MethodGet, pattern: "/api/vendor/v1/orders/{order_id}", counts: []string{classReads}},
	{method: fasthttp.MethodGet, pattern: "/api/vendor/v1/orders/{order_id}/reports/{service}", counts: []string{classReads, classReports}, streams: true},
}

// routeClasses are the classes each route counts, by its place in routes,
// for the policy table's plans.
func routeClasses() [][]string {
	cs := make([][]string, len(routes))
	for i, r := range routes {
		cs[i] = r.counts
	}
	return cs
}

// routeLabels are the route label values of the metrics and the access
// log, by index: "unmatched" (404 and 405 answers, and answers before
// routing) first, then each route as newRouter registers it.
type routeLabels []string

// routeUnmatched is the label index of "unmatched".
const routeUnmatched = 0

func newRouteLabels() routeLabels { return routeLabels{"unmatched"} }

// add gives label the next index.
func (l *routeLabels) add(label string) int {
	*l = append(*l, label)
	return len(*l) - 1
}

// of is label index i's value.
func (l routeLabels) of(i int) string {
	if i >= 0 && i < len(l) {
		return l[i]
	}
	return l[routeUnmatched]
}

// newRouter builds the router: exact matching, and 404/405 answered with the
// envelope by the gateway. It gives each route, vendor and documentation,
// its label, in the order they are registered.
func (g *Gateway) newRouter() *router.Router {
	g.labels = newRouteLabels()
	g.vendorRoutes = make([]route, len(routes))
	for i := range routes {
		rt := routes[i] // this gateway's copy
		rt.plan, rt.label = i, g.labels.add(rt.pattern)
		g.vendorRoutes[i] = rt
	}
	if g.docs != nil {
		for _, d := range docs.Routes() {
			g.docRoutes = append(g.docRoutes, docRoute{Route: d, label: g.labels.add(d.Path)})
		}
	}
	serve := func(rt *route) fasthttp.RequestHandler {
		return func(ctx *fasthttp.RequestCtx) { g.serveVendor(ctx, rt) }
	}
	r := g.routerWith(serve)
	g.paramRoutes = g.paramRoutesWith(serve)
	for i := range g.docRoutes {
		d := &g.docRoutes[i]
		r.GET(d.Path, func(ctx *fasthttp.RequestCtx) { g.serveDocs(ctx, d.Route, d.label) })
	}
	return r
}

// routerWith is a router of the vendor routes, each answered by the handler
// serve makes for it, and 404/405 answered by the gateway.
func (g *Gateway) routerWith(serve func(rt *route) fasthttp.RequestHandler) *router.Router {
	r := httpapi.NewRouter(func(ctx *fasthttp.RequestCtx) { g.serveRefusal(ctx, errNotFound) },
		func(ctx *fasthttp.RequestCtx) { g.serveRefusal(ctx, errMethodNotAllowed) })
	for i := range g.vendorRoutes {
		rt := &g.vendorRoutes[i]
		r.Handle(rt.method, rt.pattern, serve(rt))
	}
	return r
}

// paramRoutesWith is the vendor routes with parameters (package
// paramroute), matched ahead of the router, each answered by the handler
// serve makes for it (the router's, routerWith).
func (g *Gateway) paramRoutesWith(serve func(rt *route) fasthttp.RequestHandler) paramroute.Routes {
	var ps paramroute.Routes
	for i := range g.vendorRoutes {
		rt := &g.vendorRoutes[i]
		if p, ok := paramroute.New(rt.method, rt.pattern, serve(rt)); ok {
			ps = append(ps, p)
		}
	}
	return ps
}
