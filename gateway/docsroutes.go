package gateway

import (
	"bytes"
	"fmt"
	"time"

	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"

	"vendorgate/config"
	"vendorgate/gateway/docs"
	"vendorgate/gateway/limit"
	"vendorgate/shared/apierr"
	"vendorgate/shared/wire"
)

// The documentation routes of the public listener (/docs, /openapi.yaml
// and /openapi.json) are answered before authentication, limited per client
// address in process (config.Docs), and show the public address
// (config.Gateway.PublicBaseURL), never a request's Host.

// docRoute is one documentation route; index is its metric label index.
type docRoute struct {
	index int
	path  string
	pick  func(*docs.Set) *docs.Asset
}

// docRoutes follow the route label "unmatched" (routeUnmatched).
var docRoutes = []docRoute{
	{index: routeUnmatched + 1, path: "/docs", pick: func(s *docs.Set) *docs.Asset { return &s.HTML }},
	{index: routeUnmatched + 2, path: "/openapi.yaml", pick: func(s *docs.Set) *docs.Asset { return &s.YAML }},
	{index: routeUnmatched + 3, path: "/openapi.json", pick: func(s *docs.Set) *docs.Asset { return &s.JSON }},
}

var errDocsRateLimited = &apierr.Error{Code: apierr.RateLimited, Message: "too many documentation requests from this address; see Retry-After"}

// docsCacheControl: documentation is the same for everyone and changes
// only on a reload; vendor answers stay no-store.
const docsCacheControl = "public, max-age=300"

// docsRate is the documentation routes' limit as a limiter rate.
func docsRate(d config.Docs) limit.Rate {
	return limit.Rate{Name: "docs", Limit: d.Rate, Period: d.Window}
}

// renderDocs renders the documentation for the settings in sn; it runs at
// start and on every reload, so the page shows the limits in force.
func (g *Gateway) renderDocs(sn *snapshot) error {
	if len(g.openAPI) == 0 {
		return nil
	}
	s := sn.configured
	var pols []docs.Policy
	add := func(name, applies, scope string, l config.Limit) {
		r := rateOf(name, l)
		if !l.Enabled() || l.Shadow {
			return // shadow limits never refuse: clients are not told of them
		}
		pols = append(pols, docs.Policy{Name: name, Applies: applies, Scope: scope, Quota: r.Quota(), Rate: l.Rate, Window: l.Period})
	}
	reads := "GET routes under /api/vendor/"
	orders := "POST /api/vendor/v1/orders"
	add("reads", reads, "per vendor, across all its keys", s.Vendor.Reads)
	add("orders", orders, "per vendor, across all its keys", s.Vendor.Orders)
	add("key-reads", reads, "per key", s.PerKey.Reads)
	add("key-orders", orders, "per key", s.PerKey.Orders)
	dr := g.docsRate
	set, err := docs.Render(docs.Options{
		Document: g.openAPI, PublicBaseURL: g.publicBaseURL, Prefixes: g.prefixes, Limits: pols,
		FailedKeysPerAddress: sn.failedKeys.PerAddress, FailedKeysPerKey: sn.failedKeys.PerKey, FailedKeysWindow: sn.failedKeys.Window,
		Docs: docs.Policy{Name: dr.Name, Applies: "/docs, /openapi.yaml, /openapi.json", Scope: "per client address",
			Quota: dr.Quota(), Rate: dr.Limit, Window: dr.Period},
		MaxBodyBytes: g.maxBodyBytes,
	})
	if err != nil {
		return fmt.Errorf("render docs: %w", err)
	}
	g.docs.Store(set)
	return nil
}

// registerDocs adds the documentation routes to r when there is a
// document to serve.
func (g *Gateway) registerDocs(r *router.Router) {
	if len(g.openAPI) == 0 {
		return
	}
	for i := range docRoutes {
		d := &docRoutes[i]
		r.GET(d.path, func(ctx *fasthttp.RequestCtx) { g.serveDocs(ctx, d) })
	}
}

// serveDocs answers a documentation route from memory: no key, limited per
// client address, cacheable, 304 on a matching If-None-Match.
func (g *Gateway) serveDocs(ctx *fasthttp.RequestCtx, d *docRoute) {
	ex := exchange{start: ctx.Time(), route: d.index}
	g.setRequestID(ctx, &ex)
	ex.client = g.snap.Load().clientIP.Client(ctx)
	ctx.Response.Header.SetBytesV(wire.HeaderRequestID, ex.requestID())
	var cs limit.Checks
	cs.Add(limit.Check{Key: "docs:" + ex.client.String(), Rate: g.docsRate})
	dec, _ := g.docsLimiter.Allow(cs) // the in-process limiter never fails
	if !dec.Allowed {
		g.respond.Write(ctx, errDocsRateLimited, dec.RetryAfter)
		g.finish(ctx, &ex) // an error: no-store like every envelope
		return
	}
	a := d.pick(g.docs.Load())
	h := &ctx.Response.Header
	h.Set("Cache-Control", docsCacheControl)
	h.Set("ETag", a.ETag)
	h.Set("X-Content-Type-Options", "nosniff")
	if d.path == "/docs" {
		// The page needs nothing from anywhere: no script, no font, no image.
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		h.Set("Referrer-Policy", "no-referrer")
	}
	if etagMatches(ctx.Request.Header.Peek(fasthttp.HeaderIfNoneMatch), a.ETag) {
		ctx.SetStatusCode(fasthttp.StatusNotModified)
	} else {
		ctx.SetContentType(a.ContentType)
		ctx.SetBody(a.Body)
	}
	g.finishDocs(ctx, &ex)
}

// finishDocs counts and logs a documentation answer as finish does, without
// the vendor API's no-store.
func (g *Gateway) finishDocs(ctx *fasthttp.RequestCtx, ex *exchange) {
	if g.draining.Load() {
		ctx.SetConnectionClose()
	}
	status := ctx.Response.StatusCode()
	g.metrics.Request(ex.route, ctx.Method(), status)
	g.metrics.ObserveRequest(ex.route, time.Since(ex.start), "")
	if g.accessLog {
		g.log.Info("request", "request_id", string(ex.requestID()), "route", routeLabelOf(ex.route),
			"method", string(ctx.Method()), "status", status, "client", ex.client.String())
	}
}

// etagMatches applies If-None-Match's weak comparison: "*" or any listed
// tag equal to etag, W/ ignored.
func etagMatches(header []byte, etag string) bool {
	for len(header) > 0 {
		var tag []byte
		i := bytes.IndexByte(header, ',')
		if i < 0 {
			tag, header = header, nil
		} else {
			tag, header = header[:i], header[i+1:]
		}
		tag = bytes.TrimSpace(tag)
		tag = bytes.TrimPrefix(tag, []byte("W/"))
		if string(tag) == "*" || string(tag) == etag {
			return true
		}
	}
	return false
}
