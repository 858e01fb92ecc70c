// Package admin is the gateway's operator listener: Prometheus /metrics,
// /healthz (alive), /readyz (named checks: draining, Redis, backends), the
// OpenAPI document and, behind the admin token, the usage view and Go's
// runtime profiles (/debug/pprof/). It is served on its own listener, never the public one.
package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"vendorgate/shared/profiling"
	"vendorgate/shared/readyz"
)

// Options configures the admin handler.
type Options struct {
	Registry *prometheus.Registry
	// Checks are /readyz's named checks, in the order they are listed. They
	// must answer at once (cached verdicts), not call out.
	Checks []readyz.Check
	// OpenAPI is served at /openapi.yaml when set.
	OpenAPI []byte
	// Usage serves /usage and /usage/{vendor_id} (UsageHandler); 404 when nil.
	Usage fasthttp.RequestHandler
	// Profiles serves /debug/pprof/ (profiling.Handler); 404 when nil.
	Profiles fasthttp.RequestHandler
}

// Handler returns the admin listener's handler.
func Handler(o Options) fasthttp.RequestHandler {
	metrics := fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(o.Registry, promhttp.HandlerOpts{
		EnableOpenMetrics: true, // when the scraper asks for it: exemplars are served only in OpenMetrics
	}))
	return func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.Set("Cache-Control", "no-store")
		switch string(ctx.Path()) {
		case "/metrics":
			metrics(ctx)
		case "/healthz":
			ctx.SetContentType("application/json")
			ctx.SetBodyString(`{"status":"ok"}`)
		case "/readyz":
			serveReadyz(ctx, o.Checks)
		case "/openapi.yaml":
			if o.OpenAPI == nil {
				ctx.SetStatusCode(http.StatusNotFound)
				return
			}
			ctx.SetContentType("application/yaml")
			ctx.SetBody(o.OpenAPI)
		case "/usage":
			if o.Usage == nil {
				notFound(ctx)
				return
			}
			o.Usage(ctx)
		default:
			if o.Usage != nil && strings.HasPrefix(string(ctx.Path()), "/usage/") {
				o.Usage(ctx)
				return
			}
			if o.Profiles != nil && profiling.Handles(ctx.Path()) {
				o.Profiles(ctx)
				return
			}
			notFound(ctx)
		}
	}
}

// readyzBody is /readyz's answer: {"status":"ready"} or, with a 503,
// {"status":"unready","unhealthy":[names]}; checks lists every check with
// ?verbose and on every 503 (as the Kubernetes API server is always verbose
// on failure).
type readyzBody struct {
	Status    string          `json:"status"`
	Unhealthy []string        `json:"unhealthy,omitempty"`
	Checks    []readyz.Result `json:"checks,omitempty"`
	Warnings  []string        `json:"warnings,omitempty"`
}

func serveReadyz(ctx *fasthttp.RequestCtx, checks []readyz.Check) {
	q := readyz.ParseQuery(ctx.QueryArgs())
	r := readyz.Run(context.Background(), checks, q)
	body := readyzBody{Status: "ready", Warnings: r.Warnings}
	if !r.Ready() {
		ctx.SetStatusCode(http.StatusServiceUnavailable)
		body.Status, body.Unhealthy = "unready", r.Failed
	}
	if q.Verbose || !r.Ready() {
		body.Checks = r.Results
	}
	b, _ := json.Marshal(body)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

func notFound(ctx *fasthttp.RequestCtx) {
	ctx.SetStatusCode(http.StatusNotFound)
	ctx.SetContentType("application/json")
	ctx.SetBodyString(`{"error":{"code":"not_found","message":"not found","fields":null}}`)
}
