// Package metrics holds the backend's Prometheus metrics on a registry the
// Backend owns (never the global default), the request instrumentation for
// both listeners, and the /metrics handler.
package metrics

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/fasthttp/router"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"vendorgate/shared/wire"
)

// CountOrders counts the stored orders by status, for the orders gauge.
type CountOrders func(ctx context.Context) (map[string]int, error)

// Metrics are the backend's metrics.
type Metrics struct {
	Registry *prometheus.Registry

	requests       *prometheus.CounterVec
	duration       *prometheus.HistogramVec
	ordersCreated  *prometheus.CounterVec
	sweeperRuns    prometheus.Counter
	sweeperClosed  prometheus.Counter
	simulatorSteps *prometheus.CounterVec
}

// New registers every metric on a new registry. count feeds the
// vendorgate_backend_orders gauge at each scrape, so it is always current.
func New(count CountOrders, log *slog.Logger) *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		Registry: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vendorgate_backend_requests_total", Help: "Requests answered, by route pattern, method and status.",
		}, []string{"route", "method", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "vendorgate_backend_request_duration_seconds", Help: "Time to answer a request, by route pattern.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"route"}),
		ordersCreated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vendorgate_backend_orders_created_total", Help: "Orders placed, by environment.",
		}, []string{"environment"}),
		sweeperRuns: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vendorgate_backend_sweeper_runs_total", Help: "Runs of the deadline sweeper.",
		}),
		sweeperClosed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vendorgate_backend_sweeper_orders_closed_total", Help: "Orders the sweeper closed at their deadline.",
		}),
		simulatorSteps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vendorgate_backend_simulator_steps_total", Help: "Steps of the sandbox provider, by service and outcome.",
		}, []string{"service", "outcome"}),
	}
	reg.MustRegister(m.requests, m.duration, m.ordersCreated, m.sweeperRuns, m.sweeperClosed, m.simulatorSteps,
		&ordersGauge{count: count, log: log, desc: prometheus.NewDesc("vendorgate_backend_orders",
			"Current orders by status.", []string{"status"}, nil)},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// CountVendors counts vendors for a gauge, at each scrape.
type CountVendors func(ctx context.Context) (int, error)

// WatchKeyExpiry registers vendorgate_backend_vendors_keys_expiring, which
// count gives at each scrape: the approved live vendors whose every working
// key expires within 7 days (vendors.KeyExpiryAlert). No vendor label:
// which vendors they are is `vendorctl key list --expiring 7d`.
func (m *Metrics) WatchKeyExpiry(count CountVendors, log *slog.Logger) {
	m.Registry.MustRegister(&countGauge{count: count, log: log, what: "count vendors whose keys expire soon, for metrics",
		desc: prometheus.NewDesc("vendorgate_backend_vendors_keys_expiring", "Approved live vendors whose every working key expires within 7 days.", nil, nil)})
}

// WatchBillingOutbox registers vendorgate_backend_billing_outbox_unsent,
// the billable services the billing export has not had taken by its
// endpoint yet, counted by count at each scrape (only with the export on).
func (m *Metrics) WatchBillingOutbox(count CountVendors, log *slog.Logger) {
	m.Registry.MustRegister(&countGauge{count: count, log: log, what: "count the billing outbox, for metrics",
		desc: prometheus.NewDesc("vendorgate_backend_billing_outbox_unsent", "Billable services the billing export has not had taken by its endpoint yet.", nil, nil)})
}

// countGauge is one gauge counted at each scrape.
type countGauge struct {
	count CountVendors
	log   *slog.Logger
	what  string // the warning when count fails
	desc  *prometheus.Desc
}

func (g *countGauge) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

func (g *countGauge) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	n, err := g.count(ctx)
	if err != nil {
		g.log.Warn(g.what, "error", err)
		return
	}
	ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, float64(n))
}

// OrderCreated counts one placed order.
func (m *Metrics) OrderCreated(environment string) {
	m.ordersCreated.WithLabelValues(environment).Inc()
}

// SweeperRun counts one sweeper run that closed n orders.
func (m *Metrics) SweeperRun(closed int) {
	m.sweeperRuns.Inc()
	m.sweeperClosed.Add(float64(closed))
}

// SimulatorStep counts one sandbox step on one service.
func (m *Metrics) SimulatorStep(service, outcome string) {
	m.simulatorSteps.WithLabelValues(service, outcome).Inc()
}

// Instrument counts and times every request h answers, labelled with the
// router's matched pattern, or "unmatched".
func (m *Metrics) Instrument(h fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		start := time.Now()
		h(ctx)
		route := "unmatched"
		if p, ok := ctx.UserValue(router.MatchedRoutePathParam).(string); ok && p != "" {
			route = p
		}
		m.requests.WithLabelValues(route, methodLabel(ctx.Method()), strconv.Itoa(ctx.Response.StatusCode())).Inc()
		m.duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
	}
}

// methodLabel is the method's name for the standard methods and "other"
// for any other: a label taken from the request line as sent would let a
// client mint a series per invented method (M1, M2, ...).
func methodLabel(method []byte) string {
	switch string(method) {
	case fasthttp.MethodGet:
		return fasthttp.MethodGet
	case fasthttp.MethodHead:
		return fasthttp.MethodHead
	case fasthttp.MethodPost:
		return fasthttp.MethodPost
	case fasthttp.MethodPut:
		return fasthttp.MethodPut
	case fasthttp.MethodPatch:
		return fasthttp.MethodPatch
	case fasthttp.MethodDelete:
		return fasthttp.MethodDelete
	case fasthttp.MethodOptions:
		return fasthttp.MethodOptions
	case fasthttp.MethodConnect:
		return fasthttp.MethodConnect
	case fasthttp.MethodTrace:
		return fasthttp.MethodTrace
	}
	return "other"
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() fasthttp.RequestHandler {
	return fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
}

type ordersGauge struct {
	count CountOrders
	log   *slog.Logger
	desc  *prometheus.Desc
}

func (g *ordersGauge) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

func (g *ordersGauge) Collect(ch chan<- prometheus.Metric) {
	if g.count == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	counts, err := g.count(ctx)
	if err != nil {
		g.log.Warn("count orders for metrics", "error", err)
		return
	}
	statuses := []string{wire.StatusProcessing, wire.StatusUnderReview, wire.StatusCompleted,
		wire.StatusPartiallyCompleted, wire.StatusFailed}
	for _, s := range statuses {
		ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, float64(counts[s]), s)
	}
}
