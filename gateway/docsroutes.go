package gateway

import (
	"fmt"
	"time"

	"github.com/valyala/fasthttp"

	"vendorgate/gateway/docs"
	"vendorgate/gateway/policy"
	"vendorgate/gateway/respond"
	"vendorgate/shared/apierr"
	"vendorgate/shared/wire"
)

// The documentation routes of the public listener (/docs, /openapi.yaml
// and /openapi.json) are gateway/docs' Handler; the gateway registers
// them, gives them route labels, request ids, the refusal envelope, metrics
// and the access log, and re-renders them from the policy table on reload.

var errDocsRateLimited = &apierr.Error{Code: apierr.RateLimited, Message: "too many documentation requests from this address; see Retry-After"}

// renderDocs renders the documentation for the settings in sn; it runs at
// start and on every reload, so the page shows the limits in force.
func (g *Gateway) renderDocs(sn *snapshot) error {
	if g.routes.docs == nil {
		return nil
	}
	var pols []docs.Policy
	for _, p := range sn.def.Policies {
		if p.Limit <= 0 || p.Shadow {
			continue // off, or shadow: shadow limits never refuse, clients are not told of them
		}
		scope := "per vendor, across all its keys"
		if p.Scope == policy.PerKey {
			scope = "per key"
		}
		dp := docs.Policy{Name: p.Name, Applies: classDescriptions[p.Class], Scope: scope, Quota: p.Quota(), Rate: p.Limit, Window: p.Period,
			Algorithm: p.Kind.String(), InFlight: p.Kind == policy.Concurrency, Cost: p.Tokens()}
		if p.Kind == policy.Quota {
			dp.Calendar = calendarName(p.Calendar)
		}
		pols = append(pols, dp)
	}
	fk := docs.FailedKeys{PerAddress: sn.failedKeys.PerAddress, PerKey: sn.failedKeys.PerKey, Window: sn.failedKeys.Window}
	if err := g.routes.docs.Render(pols, fk); err != nil {
		return fmt.Errorf("render docs: %w", err)
	}
	return nil
}

// docRoute is a documentation route and its route label.
type docRoute struct {
	docs.Route
	label int
}

// serveDocs answers a documentation route: no key, limited per client
// address, cacheable.
func (g *Gateway) serveDocs(ctx *fasthttp.RequestCtx, d docs.Route, label int) {
	ex := exchange{start: ctx.Time(), route: label}
	g.setRequestID(ctx, &ex)
	ex.client = g.snap.Load().clientIP.Client(ctx)
	ctx.Response.Header.SetBytesV(wire.HeaderRequestID, ex.requestID())
	if ctx.IsTLS() {
		// The pages a browser opens: it keeps to HTTPS for this host for
		// a year. Not includeSubDomains (the gateway does not own its
		// parent domain's other hosts), not preload (a deployment's
		// choice, hard to undo). API clients ignore the header.
		ctx.Response.Header.Set("Strict-Transport-Security", "max-age=31536000")
	}
	retryAfter, limited, err := g.routes.docs.Serve(ctx, d, ex.client)
	switch {
	case limited:
		g.respond.Write(ctx, errDocsRateLimited, retryAfter)
		g.finish(ctx, &ex) // an error: no-store like every envelope
		return
	case err != nil:
		ex.err = err // the access log says what failed
		g.respond.Write(ctx, respond.Internal(), 0)
		g.finish(ctx, &ex)
		return
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
	d := time.Since(ex.start)
	g.metrics.Request(ex.route, ctx.Method(), status, d)
	g.metrics.ObserveRequest(ex.route, d, "")
	if g.alog.on {
		g.log.Info("request", "request_id", string(ex.requestID()), "route", g.routes.labels.of(ex.route),
			"method", string(ctx.Method()), "status", status, "client", ex.client.String())
	}
}

// calendarName says a quota's window as the docs page does.
func calendarName(c policy.Calendar) string {
	switch {
	case c.Month:
		return "UTC month"
	case c.Days <= 1:
		return "UTC day"
	}
	return fmt.Sprintf("%d days (UTC, counted from 1970-01-01)", c.Days)
}
