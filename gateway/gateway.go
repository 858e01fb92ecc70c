// Package gateway is vendorgate's request handler: it routes,
// authenticates, throttles failed keys, admits by account state and exact
// rate limits, and proxies to the backend (flow.go, in the specification's
// order). The listeners, TLS and connection bounds that feed it are package
// edge's. New takes the validated configuration (config.Gateway) and wires
// the parts here; lifecycle.go serves (through edge), reloads and shuts
// down, health.go keeps the breaker and readiness gauges current (the
// /readyz checks are package readiness); the limiters, the failed-key
// throttle and the usage store, and their Redis clients, are package
// stores'; the parts' notifications become metrics in package gwmetrics.
package gateway

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/trace"

	"vendorgate/config"
	"vendorgate/gateway/accesslog"
	"vendorgate/gateway/admin"
	"vendorgate/gateway/admission"
	"vendorgate/gateway/auth"
	"vendorgate/gateway/backendapi"
	"vendorgate/gateway/docs"
	"vendorgate/gateway/edge"
	"vendorgate/gateway/gwmetrics"
	"vendorgate/gateway/inflight"
	"vendorgate/gateway/limit"
	"vendorgate/gateway/outage"
	"vendorgate/gateway/plain"
	"vendorgate/gateway/probe"
	"vendorgate/gateway/proxy"
	"vendorgate/gateway/requestid"
	"vendorgate/gateway/respond"
	"vendorgate/gateway/stores"
	"vendorgate/gateway/usage"
	"vendorgate/shared/apikey"
	"vendorgate/shared/logtext"
	"vendorgate/shared/profiling"
)

// Options is everything New needs.
type Options struct {
	// Config is the gateway's configuration with its defaults filled in
	// (config.LoadGateway, or config.DefaultGateway in tests). New validates
	// it and fills in no default of its own; Reload takes a new one.
	Config *config.Gateway
	// Logger receives the access log and events; slog.Default() when nil.
	Logger *slog.Logger
	// OpenAPI is served on the admin listener when set, and rendered for
	// vendors on the public listener (/docs, /openapi.yaml, /openapi.json).
	OpenAPI []byte
	// Now is the clock of key expiry and the in-process limiter; time.Now
	// when nil.
	Now func() time.Time
	// LimiterClock is the Redis limiter's monotonic time and timers (its
	// leases, its transport's waits and on-time probe); the system's when
	// nil.
	LimiterClock limit.Clock
	// DisableAccessLog turns off the one line per request (benchmarks).
	DisableAccessLog bool
	// Tracer makes a server span per request with a span for the key
	// lookup, the limiter and the backend call; nil is tracing off
	// (shared/tracing).
	Tracer trace.Tracer
}

// Gateway is one gateway instance.
type Gateway struct {
	log    *slog.Logger
	snap   atomic.Pointer[snapshot]
	auth   *auth.Authenticator
	lookup *backendapi.Client
	// stores are the limiters, the failed-key throttle and the usage
	// store, and their Redis clients (package stores); in place, not
	// behind a pointer.
	stores stores.Stores
	proxy  *proxy.Proxy
	// inflight counts each vendor's requests in flight here (admit).
	inflight *inflight.Counter
	// books keeps the books of each admission (admission.Books): metrics,
	// usage, the shadow limits' log lines.
	books admission.Books
	// admission admits a request under every kind of limit in one call
	// (package admission): the windows, the limiter, inflight and slots.
	admission *admission.Admitter
	probe     *probe.Prober
	respond   *respond.Writer
	metrics   *admin.Metrics
	hooks     *gwmetrics.Hooks // the parts' notifications into metrics
	// routes are the routes, their labels and the routers that match
	// them.
	routes routing
	// edge holds the listeners (public, admin, http_listen), their
	// connection bounds and TLS (package edge).
	edge *edge.Server

	// bounds are what a client may hold before it has shown a key: the
	// body limit its headers earn, its connections (clientbounds.go).
	bounds clientBounds
	// plain answers the optional plain-HTTP listener (package plain); nil
	// without http_listen.
	plain *plain.Handler

	subscriber *auth.Subscriber
	usage      *usage.Recorder

	// alog is the access log's settings and its bound on refusal lines.
	alog     accessLogging
	outages  *outage.Book
	tracer   trace.Tracer     // nil: tracing off
	rids     requestid.Source // the request ids, in place
	draining atomic.Bool

	// poll runs pollBreakers until Close.
	poll poller
}

// New builds a gateway: it starts the invalidation subscriber, the breaker
// poller and the readiness prober (which Shutdown stops), and returns once
// the prober has a first verdict on Redis and every backend.
func New(o Options) (_ *Gateway, err error) {
	c := o.Config
	if c == nil {
		return nil, errors.New("gateway: no configuration")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	// Text a client sent (a User-Agent, an error's cause) is logged with
	// the characters a terminal or a log viewer acts on escaped.
	o.Logger = slog.New(logtext.NewHandler(o.Logger.Handler()))
	if o.Now == nil {
		o.Now = time.Now
	}
	sn, err := compileValid(c, nil) // what Check checks
	if err != nil {
		return nil, fmt.Errorf("gateway configuration: %w", err)
	}
	g := &Gateway{log: o.Logger, tracer: o.Tracer, poll: poller{stop: make(chan struct{}), done: make(chan struct{})},
		alog: accessLogging{on: !o.DisableAccessLog, log: o.Logger, refusals: accesslog.NewRefusals(c.AccessLog.RefusalsPerSecond),
			summaryEvery: c.AccessLog.SummaryInterval}}
	defer func() {
		if err != nil {
			g.release() // the goroutines and clients started before the failure
		}
	}()
	if g.outages, err = outage.New(g.log, g.alog.flush); err != nil {
		return nil, err
	}
	prefixes := c.KeyPrefixes.APIKey()
	var docsHandler *docs.Handler
	if len(o.OpenAPI) > 0 {
		docsHandler, err = docs.NewHandler(docs.HandlerOptions{Document: o.OpenAPI, PublicBaseURL: c.PublicBaseURL, Prefixes: prefixes,
			MaxBodyBytes: c.OrderBodyLimit(), Rate: c.Docs.Rate, Window: c.Docs.Window, Now: o.Now})
		if err != nil {
			return nil, err
		}
	}
	g.routes = newRouting(docsHandler) // assigns the route labels
	g.routes.handle(g.routeHandlers())
	if err := g.renderDocs(sn); err != nil {
		return nil, err
	}
	g.rids.Seed()

	g.metrics = admin.NewMetrics(g.routes.labels)
	if g.hooks, err = gwmetrics.New(g.metrics, g.log); err != nil {
		return nil, err
	}
	sn.countDecisions(g.metrics)
	g.snap.Store(sn)
	g.metrics.ConfigInfo.WithLabelValues(c.Version).Set(1)
	g.inflight = inflight.New()
	refusedByCap, tooSlow := g.hooks.RegisterInFlight(g.inflight)
	g.books = admission.NewBooks(g.log, refusedByCap)
	g.hooks.RegisterSlots(func() int {
		if g.stores.Slots == nil {
			return 0
		}
		return g.stores.Slots.Held()
	})

	hop, err := backendTLS(c.BackendTLS)
	if err != nil {
		return nil, err
	}
	g.lookup, err = backendapi.New(backendapi.Options{Backends: c.BackendURL, InternalToken: c.InternalToken, TLS: hop,
		Timeout: min(c.Proxy.Timeout, lookupTimeoutMax), MaxConns: lookupMaxConns, BreakerOpenFor: c.Proxy.BreakerOpenFor,
		BreakerFailures: c.Proxy.BreakerFailures, OnStateChange: g.hooks.BreakerState})
	if err != nil {
		return nil, err
	}
	signer, err := apikey.NewSigner(c.KeySigningSecrets)
	if err != nil {
		return nil, fmt.Errorf("gateway: key signing secrets: %w", err)
	}
	g.stores, err = stores.New(stores.Options{Config: c, Now: o.Now, LimiterClock: o.LimiterClock, Logger: g.log, Hooks: g.hooks, Metrics: g.metrics, Names: g.usageNames})
	if err != nil {
		return nil, err
	}
	st := &g.stores
	if g.admission, err = admission.New(st.Windows, st.Limiter, g.inflight, st.Slots); err != nil {
		return nil, err
	}
	// Usage buckets follow the wall clock (time.Now), not o.Now: they are
	// shared with other replicas and read by operators in real minutes.
	// Every flush also feeds the backend's daily totals (the month report),
	// each part bounded by the key lookup's timeout and the whole Apply by
	// a flush interval: a backend that hangs delays no later flush.
	toBackend, err := usage.NewBackend(usage.BackendOptions{Post: g.lookup.PostUsage, Timeout: c.Usage.FlushInterval})
	if err != nil {
		return nil, err
	}
	g.usage, err = usage.New(usage.Options{Stores: []usage.Store{st.Usage, toBackend}, Interval: c.Usage.FlushInterval,
		MaxAge: usageMaxAge, MaxBytes: usageMaxBytes, OnFlush: g.hooks.UsageFlush, Names: g.usageNames})
	if err != nil {
		return nil, err
	}
	kc := c.KeyCache.InForce()
	cache, err := auth.NewCache(auth.CacheOptions{Size: kc.Size, NegativeSize: kc.NegativeSize,
		TTL: kc.TTL, PushedTTL: kc.PushedTTL, NegativeTTL: kc.NegativeTTL, Now: o.Now})
	if err != nil {
		return nil, err
	}
	g.hooks.RegisterKeyCache(cache, func() int {
		if g.auth == nil {
			return 0
		}
		return g.auth.RefreshesScheduled()
	})
	if st.Clients.Sub != nil {
		g.subscriber = auth.Subscribe(st.Clients.Sub, cache, g.log)
	}
	g.auth, err = auth.New(auth.Options{Prefixes: prefixes, Signer: signer, Cache: cache, Lookup: g.lookup, Now: o.Now, Usage: g.usage,
		InFlight: g.inflight, MaxRefreshes: lookupMaxConns / 2})
	if err != nil {
		return nil, err
	}
	observe, err := g.hooks.UpstreamObserver(c.BackendURL)
	if err != nil {
		return nil, err
	}
	g.proxy, err = proxy.New(proxy.Options{Backends: c.BackendURL, InternalToken: c.InternalToken, TLS: hop, Timeout: c.Proxy.Timeout,
		StreamIdleTimeout: c.Proxy.StreamIdleTimeout, MaxConns: c.Proxy.MaxConns, BreakerOpenFor: c.Proxy.BreakerOpenFor, BreakerFailures: c.Proxy.BreakerFailures,
		StreamMaxConns: c.Proxy.StreamMaxConns, MaxConnWait: proxyConnWait, OnTooSlow: tooSlow.Inc,
		MinRate:       proxy.MinRate{Bytes: c.Proxy.StreamMinRate, Window: c.Proxy.StreamMinRateWindow, Grace: c.Proxy.StreamMinRateGrace},
		OnStateChange: g.hooks.BreakerState, ObserveUpstream: observe})
	if err != nil {
		return nil, err
	}

	g.respond = respond.NewWriter(cannedErrors()...)
	if c.HTTPListen != "" {
		g.plain, err = plain.New(plain.Options{BaseURL: c.PublicBaseURL, RefusalsPerSecond: c.AccessLog.RefusalsPerSecond,
			Registry: g.metrics.Registry, Logger: g.log, Respond: g.respond, Keys: g.auth, NotFound: errNotFound, Malformed: errMalformed,
			RequestID: g.rids.Of, Client: func(ctx *fasthttp.RequestCtx) string { return g.snap.Load().clientIP.Client(ctx).String() },
			Challenge: func(ctx *fasthttp.RequestCtx, path []byte) bool { return g.edge.HTTPChallenge(ctx, path) }})
		if err != nil {
			return nil, err
		}
	}
	po := probe.Options{Redis: st.Clients.Limiter, RedisTimeout: c.Redis.Timeout, Backends: c.BackendURL, BackendTLS: hop,
		InternalToken: c.InternalToken, Logger: g.log, BackendTimeout: min(c.Proxy.Timeout, probeTimeoutMax),
		Interval: probeInterval, OnChange: g.outages.OnChange}
	if st.Clients.Limiter == nil {
		po.Redis = nil // a nil client in the interface would read as set
	}
	g.probe, err = probe.New(po)
	if err != nil {
		return nil, err
	}
	checks, err := g.readyChecks()
	if err != nil {
		return nil, err
	}
	g.bounds = newClientBounds(c, g.auth, &g.rids, &g.snap)
	// The listeners, their connection bounds and TLS (package edge) feed
	// these handlers; the certificates are read here, and a file that
	// cannot be read refuses the start.
	eo := edge.Options{Config: c, Logger: g.log, Registry: g.metrics.Registry, Now: o.Now,
		Handler: g.serve, ErrorHandler: g.serverError, HeaderReceived: g.bounds.headerReceived,
		Admin: admin.Handler(admin.Options{Registry: g.metrics.Registry, Checks: checks, OpenAPI: o.OpenAPI,
			Usage: admin.UsageHandler(admin.UsageOptions{Token: c.AdminToken,
				Reader: &usage.Reader{Store: st.Usage, Limits: g.usageLimits, Quotas: g.usageQuotas}}),
			Profiles: profiling.Handler(c.AdminToken, "vendorgate-gateway-admin", admin.GatewayAdminToken)}),
		Trusted: g.bounds.connExempt, Refusal: g.bounds.connRefusal}
	if g.plain != nil {
		eo.Plain, eo.PlainError = g.plain.Serve, g.plain.Error
	}
	if g.edge, err = edge.New(eo); err != nil {
		return nil, err
	}
	go g.poll.run(pollInterval, func() { g.pollBreakers(checks) })
	return g, nil
}

// HTTPServerDuration is the http_server_request_duration_seconds histogram,
// for its export over OTLP (admin.StartOTLPMetrics).
func (g *Gateway) HTTPServerDuration() prometheus.Collector { return g.metrics.HTTPServerDuration }
