package gateway

import (
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"vendorgate/gateway/docs"
	"vendorgate/gateway/openapi"
)

// TestRouteLabels: registering the routes gives each its own label, its
// pattern (or the documentation route's path), after "unmatched".
func TestRouteLabels(t *testing.T) {
	h, err := docs.NewHandler(docs.HandlerOptions{Document: openapi.Document, Rate: 1, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	rs := newRouting(h)
	want := []string{"unmatched"}
	for _, r := range routes {
		want = append(want, r.pattern)
	}
	for _, d := range docs.Routes() {
		want = append(want, d.Path)
	}
	if len(rs.labels) != len(want) {
		t.Fatalf("labels %q, want %q", rs.labels, want)
	}
	for i := range want {
		if rs.labels[i] != want[i] || rs.labels.of(i) != want[i] {
			t.Fatalf("label %d is %q, want %q", i, rs.labels[i], want[i])
		}
	}
	if rs.labels.of(-1) != "unmatched" || rs.labels.of(len(want)) != "unmatched" {
		t.Fatal("an index past the labels is not unmatched")
	}
}

// TestParamRoutesMatchAsTheRouter: the routes with parameters, matched
// ahead of the router, take a request only where the router would give it
// the same route, and they take every request to them (the router's copy
// of the values is what they save). Every registered path is tried too, so
// that a static route a parameter would shadow shows.
func TestParamRoutesMatchAsTheRouter(t *testing.T) {
	h, err := docs.NewHandler(docs.HandlerOptions{Document: openapi.Document, Rate: 1, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	rs := newRouting(h)
	var got *route
	serve := func(rt *route) fasthttp.RequestHandler { return func(*fasthttp.RequestCtx) { got = rt } }
	r, ps := rs.routerWith(serve, nil, nil), rs.paramRoutesWith(serve)
	if len(ps) != 2 {
		t.Fatalf("%d routes with parameters, want 2 (/orders/{order_id} and its reports)", len(ps))
	}
	const o = "/api/vendor/v1/orders/"
	claimed := []string{o + "x", o + "0b9a7f0e-1111-4222-8333-444455556666", o + "a%2Fb", o + "{order_id}", o + "..", o + "x?q=1",
		o + "x/reports/psp", o + "x/reports/{service}", o + "%2e%2e/reports/mvr", o + "x/reports/psp?download=1", "http://h" + o + "x"}
	paths := append([]string{o, o[:len(o)-1], "/api/vendor/v1/ordersx", o + "/", o + "x/", o + "x//", o + "//reports/psp",
		o + "x/reports", o + "x/reports/", o + "x/reports/psp/", o + "x/reports/psp/y", o + "x/REPORTS/psp", o + "x/y/psp",
		o + "x//reports/psp", "/API/vendor/v1/orders/x", "/api/vendor/v1/orders/../me", "/", "//api/vendor/v1/orders/x"}, claimed...)
	for _, rt := range rs.vendor {
		paths = append(paths, rt.pattern)
	}
	for _, d := range rs.docRoutes {
		paths = append(paths, d.Path)
	}
	request := func(method, uri string) *fasthttp.RequestCtx {
		var ctx fasthttp.RequestCtx
		ctx.Request.Header.SetMethod(method)
		ctx.Request.SetRequestURI(uri)
		return &ctx
	}
	for _, method := range []string{"GET", "POST", "HEAD", "DELETE", "get"} {
		for _, path := range paths {
			ctx := request(method, path)
			h := ps.Handler(ctx)
			if h == nil {
				if method == "GET" && contains(claimed, path) {
					t.Errorf("GET %s went to the router", path)
				}
				continue
			}
			got = nil
			h(ctx)
			fast := got
			got = nil
			ctx = request(method, path)
			if rh, _ := r.Lookup(method, string(ctx.Request.URI().PathOriginal()), ctx); rh != nil {
				rh(ctx)
			}
			if got != fast {
				t.Errorf("%s %s: matched %s, the router's route is %v", method, path, fast.pattern, got)
			}
		}
	}
}
