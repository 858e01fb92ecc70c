// Package admin is the gateway's operator listener: Prometheus /metrics,
// /healthz (alive), /readyz (Redis, backend breakers, draining) and the
// OpenAPI document. It is served on its own listener, never the public one.
package admin

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
)

// Options configures the admin handler.
type Options struct {
	Registry *prometheus.Registry
	// Ready returns the parts that are not ready (empty: ready).
	Ready func() []string
	// OpenAPI is served at /openapi.yaml when set.
	OpenAPI []byte
	// Usage serves /usage and /usage/{vendor_id} (UsageHandler); 404 when nil.
	Usage fasthttp.RequestHandler
}

// Handler returns the admin listener's handler.
func Handler(o Options) fasthttp.RequestHandler {
	metrics := fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(o.Registry, promhttp.HandlerOpts{}))
	return func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.Set("Cache-Control", "no-store")
		switch string(ctx.Path()) {
		case "/metrics":
			metrics(ctx)
		case "/healthz":
			ctx.SetContentType("application/json")
			ctx.SetBodyString(`{"status":"ok"}`)
		case "/readyz":
			problems := o.Ready()
			ctx.SetContentType("application/json")
			if len(problems) == 0 {
				ctx.SetBodyString(`{"status":"ready"}`)
				return
			}
			ctx.SetStatusCode(http.StatusServiceUnavailable)
			b, _ := json.Marshal(map[string]any{"status": "unready", "unhealthy": problems})
			ctx.SetBody(b)
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
			notFound(ctx)
		}
	}
}

func notFound(ctx *fasthttp.RequestCtx) {
	ctx.SetStatusCode(http.StatusNotFound)
	ctx.SetContentType("application/json")
	ctx.SetBodyString(`{"error":{"code":"not_found","message":"not found","fields":null}}`)
}
