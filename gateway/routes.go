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

	// Set by newRouting for the gateway's own copy of the route: its row in
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
// routing) first, then each route as newRouting registers it.
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

// routing is the public listener's routes and the routers that match
// them: this gateway's copies of the vendor routes (each with its plan row
// and label), the documentation routes and their handler, the route
// labels, and the three ways in: the routes with parameters (package
// paramroute) matched ahead of the router, the router, and the router of
// requests whose body was refused unread (clientbounds.go).
type routing struct {
	router *router.Router
	params paramroute.Routes
	unread *router.Router
	labels routeLabels
	// vendor are the gateway's copies of routes (with their plan and
	// label), docRoutes the documentation routes with their labels.
	vendor    []route
	docRoutes []docRoute
	// docs answers the documentation routes; nil without a document.
	docs *docs.Handler
}

// routeHandlers make the gateway's answer to each kind of route for the
// routers (routing.handle); the handlers they make call the gateway
// directly, as a router's handler did.
type routeHandlers struct {
	vendor, unread             func(rt *route) fasthttp.RequestHandler
	docs, unreadDocs           func(d *docRoute) fasthttp.RequestHandler
	notFound, methodNotAllowed fasthttp.RequestHandler
}

// newRouting gives each route, vendor and documentation (those of d, when
// not nil), its label, in the order the routers register them.
func newRouting(d *docs.Handler) routing {
	rs := routing{labels: newRouteLabels(), vendor: make([]route, len(routes)), docs: d}
	for i := range routes {
		rt := routes[i] // this gateway's copy
		rt.plan, rt.label = i, rs.labels.add(rt.pattern)
		rs.vendor[i] = rt
	}
	if d != nil {
		for _, dr := range docs.Routes() {
			rs.docRoutes = append(rs.docRoutes, docRoute{Route: dr, label: rs.labels.add(dr.Path)})
		}
	}
	return rs
}

// handle builds the routers: exact matching, 404/405 answered with the
// envelope by the gateway, each route answered by the handler h makes for
// it. The unread router has the same routes, 404 and 405, and no handler
// that reads a body or proxies (clientbounds.go).
func (rs *routing) handle(h routeHandlers) {
	rs.router = rs.routerWith(h.vendor, h.notFound, h.methodNotAllowed)
	rs.params = rs.paramRoutesWith(h.vendor)
	rs.unread = rs.routerWith(h.unread, h.notFound, h.methodNotAllowed)
	for i := range rs.docRoutes {
		d := &rs.docRoutes[i]
		rs.router.GET(d.Path, h.docs(d))
		rs.unread.GET(d.Path, h.unreadDocs(d))
	}
}

// routerWith is a router of the vendor routes, each answered by the handler
// serve makes for it, and 404/405 answered by notFound and
// methodNotAllowed.
func (rs *routing) routerWith(serve func(rt *route) fasthttp.RequestHandler, notFound, methodNotAllowed fasthttp.RequestHandler) *router.Router {
	r := httpapi.NewRouter(notFound, methodNotAllowed)
	for i := range rs.vendor {
		rt := &rs.vendor[i]
		r.Handle(rt.method, rt.pattern, serve(rt))
	}
	return r
}

// paramRoutesWith is the vendor routes with parameters (package
// paramroute), matched ahead of the router, each answered by the handler
// serve makes for it (the router's, routerWith).
func (rs *routing) paramRoutesWith(serve func(rt *route) fasthttp.RequestHandler) paramroute.Routes {
	var ps paramroute.Routes
	for i := range rs.vendor {
		rt := &rs.vendor[i]
		if p, ok := paramroute.New(rt.method, rt.pattern, serve(rt)); ok {
			ps = append(ps, p)
		}
	}
	return ps
}

// routeHandlers are the gateway's answers to each kind of route.
func (g *Gateway) routeHandlers() routeHandlers {
	return routeHandlers{
		vendor: func(rt *route) fasthttp.RequestHandler {
			return func(ctx *fasthttp.RequestCtx) { g.serveVendor(ctx, rt) }
		},
		unread: func(rt *route) fasthttp.RequestHandler {
			return func(ctx *fasthttp.RequestCtx) { g.serveUnread(ctx, rt) }
		},
		docs: func(d *docRoute) fasthttp.RequestHandler {
			return func(ctx *fasthttp.RequestCtx) { g.serveDocs(ctx, d.Route, d.label) }
		},
		unreadDocs: func(d *docRoute) fasthttp.RequestHandler {
			return func(ctx *fasthttp.RequestCtx) { g.refuseUnread(ctx, d.label) }
		},
		notFound:         func(ctx *fasthttp.RequestCtx) { g.serveRefusal(ctx, errNotFound) },
		methodNotAllowed: func(ctx *fasthttp.RequestCtx) { g.serveRefusal(ctx, errMethodNotAllowed) },
	}
}
