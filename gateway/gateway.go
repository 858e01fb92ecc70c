// Package gateway is vendorgate's edge: it routes, authenticates, throttles
// failed keys, admits by account state and exact rate limits, and proxies
// to the backend (flow.go, in the specification's order). New takes the
// validated configuration (config.Gateway) and wires the parts here;
// lifecycle.go serves, reloads and shuts down, health.go keeps the breaker
// and readiness gauges current (the /readyz checks are package
// readiness), redis.go builds the Redis clients; the parts' notifications
// become metrics in package gwmetrics.
package gateway

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fasthttp/router"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/trace"

	"vendorgate/config"
	"vendorgate/gateway/admin"
	"vendorgate/gateway/admission"
	"vendorgate/gateway/auth"
	"vendorgate/gateway/backendapi"
	"vendorgate/gateway/concurrency"
	"vendorgate/gateway/connlimit"
	"vendorgate/gateway/docs"
	"vendorgate/gateway/gwmetrics"
	"vendorgate/gateway/inflight"
	"vendorgate/gateway/limit"
	"vendorgate/gateway/outage"
	"vendorgate/gateway/policy"
	"vendorgate/gateway/probe"
	"vendorgate/gateway/proxy"
	"vendorgate/gateway/respond"
	"vendorgate/gateway/throttle"
	"vendorgate/gateway/usage"
	"vendorgate/gateway/window"
	"vendorgate/shared/apikey"
	"vendorgate/shared/logtext"
	"vendorgate/shared/profiling"
	"vendorgate/shared/serverlog"
	"vendorgate/shared/wire"
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
	// DisableAccessLog turns off the one line per request (benchmarks).
	DisableAccessLog bool
	// Tracer makes a server span per request with a span for the key
	// lookup, the limiter and the backend call; nil is tracing off
	// (shared/tracing).
	Tracer trace.Tracer
}

// limiter is what the flow needs of a rate limiter.
type limiter interface {
	Allow(cs policy.Checks) (limit.Decision, error)
	// Refund gives back what d charged for the checks of policies that
	// refund (the gateway failed the request for the backend). By value,
	// as Allow: a pointer into the request's exchange passed through an
	// interface would move the exchange to the heap on every request.
	Refund(cs policy.Checks, d limit.Decision) int
}

// Gateway is one gateway instance.
type Gateway struct {
	log      *slog.Logger
	snap     atomic.Pointer[snapshot]
	auth     *auth.Authenticator
	lookup   *backendapi.Client
	limiter  limiter
	redisLim *limit.Redis // nil with the in-process limiter
	// windows decides the quotas and sliding windows (package window), for
	// the routes that have any.
	windows  window.Limiter
	throttle *throttle.Throttle
	proxy    *proxy.Proxy
	// inflight counts each vendor's requests in flight here (admit), and
	// inFlightRefused its refusals by the cap that refused.
	inflight        *inflight.Counter
	inFlightRefused [inflight.OverDownloads + 1]prometheus.Counter
	// admission admits a request under every kind of limit in one call
	// (package admission): the windows, the limiter, inflight and slots.
	admission *admission.Admitter
	probe     *probe.Prober
	respond   *respond.Writer
	metrics   *admin.Metrics
	hooks     *gwmetrics.Hooks // the parts' notifications into metrics
	router    *router.Router
	// paramRoutes match the vendor routes with parameters ahead of router
	// (set by newRouter).
	paramRoutes paramRoutes
	labels      routeLabels // route label values by index, assigned by newRouter
	server      *fasthttp.Server

	// Client bounds (clientbounds.go): the body limit and read timeout
	// headerReceived gives, the router of requests whose body was refused
	// unread, and the connections per peer Serve admits (open at once, and
	// new a second) with the bodies of their refusals.
	orderBodyBytes     int
	readTimeout        time.Duration
	unread             *router.Router
	maxConnsPerPeer    int
	keylessIdle        time.Duration // keyless_idle_timeout (keyless.go)
	maxNewConnsPerPeer int
	connRefusalBody    [connlimit.NumReasons][]byte             // by connlimit.Reason
	connsRefused       [connlimit.NumReasons]prometheus.Counter // by connlimit.Reason
	// conns bounds the connections of the public listener and http_listen
	// together (max_conns).
	conns *connlimit.Total
	// proxyHeaders: connections from trusted proxies begin with a PROXY
	// header (proxy_protocol, proxyprotocol.go).
	proxyHeaders bool
	// tls serves the public listener over HTTPS (tls.go); plain HTTP when
	// its certs are nil.
	tls edgeTLS
	// plain is the optional plain-HTTP listener's server (plainhttp.go);
	// nil without http_listen.
	plain *plainHTTP

	// vendorRoutes are this gateway's copies of routes (with their plan
	// and label), docRoutes the documentation routes with their labels:
	// both set by newRouter.
	vendorRoutes []route
	docRoutes    []docRoute

	// docs answers the documentation routes; nil without a document.
	docs *docs.Handler

	// served holds the listeners Serve was given, so that Shutdown closes
	// them even when it runs before Serve's goroutines registered them with
	// fasthttp; shut makes a Serve that comes after Shutdown return at once.
	servedMu sync.Mutex
	served   []net.Listener
	shut     bool
	admin    *fasthttp.Server
	// streamIdle bounds each write to a client by progress where the
	// server's whole-answer WriteTimeout is lifted (streamed reports).
	streamIdle time.Duration

	limiterClient  redis.UniversalClient
	throttleClient redis.UniversalClient // its own pool: failed keys never take the limiter's connections
	subClient      redis.UniversalClient
	usageClient    redis.UniversalClient // its own pool: flushes never wait for, or delay, a limiter call
	slotsClient    redis.UniversalClient // its own pool: the concurrency policies' slots
	slots          concurrency.Limiter
	slotErrors     *prometheus.CounterVec
	slotsRestored  prometheus.Counter
	redisDataLost  prometheus.Counter
	subscriber     *auth.Subscriber
	usage          *usage.Recorder

	accessLog bool
	// refusals bounds the access log's lines of answers with an error
	// code, written as summaries each summaryEvery past the rate.
	refusals     *refusalLog
	summaryEvery time.Duration
	outages      *outage.Book
	tracer       trace.Tracer // nil: tracing off
	ridPrefix    [9]byte      // 8 hex characters and '-'
	ridSeq       atomic.Uint64
	draining     atomic.Bool

	closeOnce sync.Once
	stopPoll  chan struct{}
	pollDone  chan struct{}
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
	g := &Gateway{log: o.Logger, accessLog: !o.DisableAccessLog, tracer: o.Tracer, streamIdle: c.Proxy.StreamIdleTimeout, stopPoll: make(chan struct{}), pollDone: make(chan struct{}),
		refusals: newRefusalLog(c.AccessLog.RefusalsPerSecond), summaryEvery: c.AccessLog.SummaryInterval}
	defer func() {
		if err != nil {
			g.release() // the goroutines and clients started before the failure
		}
	}()
	if g.outages, err = outage.New(g.log, func() { g.refusals.flush(g.log) }); err != nil {
		return nil, err
	}
	prefixes := c.KeyPrefixes.APIKey()
	if len(o.OpenAPI) > 0 {
		g.docs, err = docs.NewHandler(docs.HandlerOptions{Document: o.OpenAPI, PublicBaseURL: c.PublicBaseURL, Prefixes: prefixes,
			MaxBodyBytes: c.OrderBodyLimit(), Rate: c.Docs.Rate, Window: c.Docs.Window, Now: o.Now})
		if err != nil {
			return nil, err
		}
	}
	g.orderBodyBytes, g.readTimeout, g.keylessIdle = c.OrderBodyLimit(), c.ReadTimeout, c.KeylessIdleTimeout
	g.maxConnsPerPeer, g.maxNewConnsPerPeer = c.MaxConnsPerPeer, c.MaxNewConnsPerPeer
	g.proxyHeaders = c.ProxyProtocol
	if g.conns, err = connlimit.NewTotal(c.MaxConns); err != nil {
		return nil, fmt.Errorf("max_conns: %w", err)
	}
	g.connRefusalBody[connlimit.Open], g.connRefusalBody[connlimit.Rate] = errConnsPerPeer.Body(), errNewConnsPerPeer.Body()
	if err := g.renderDocs(sn); err != nil {
		return nil, err
	}
	var seed [4]byte
	_, _ = rand.Read(seed[:])
	hex.Encode(g.ridPrefix[:8], seed[:])
	g.ridPrefix[8] = '-'

	g.router = g.newRouter() // assigns the route labels
	g.metrics = admin.NewMetrics(g.labels)
	if g.hooks, err = gwmetrics.New(g.metrics, g.log); err != nil {
		return nil, err
	}
	sn.countDecisions(g.metrics)
	g.snap.Store(sn)
	g.metrics.ConfigInfo.WithLabelValues(c.Version).Set(1)
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vendorgate_gateway_connections_refused_total",
		Help: "Connections refused at accept, by reason: open (the peer held max_conns_per_peer already), rate (it had opened max_new_conns_per_peer in the last second), total (max_conns were open)."},
		[]string{"reason"})
	open := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "vendorgate_gateway_connections_open",
		Help: "Connections open on the public listener and http_listen together, against max_conns."},
		func() float64 { return float64(g.conns.Open()) })
	for r := range g.connsRefused {
		g.connsRefused[r] = refused.WithLabelValues(connlimit.Reason(r).String())
	}
	g.metrics.Registry.MustRegister(refused, open)
	g.inflight = inflight.New()
	refusedByCap, tooSlow := g.hooks.RegisterInFlight(g.inflight)
	g.inFlightRefused = refusedByCap
	g.registerSlots()
	g.registerDataLost()
	if err := g.setupTLS(c.TLS, c.Listen, c.HTTPListen, c.PublicBaseURL, o.Now); err != nil {
		return nil, err
	}

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
	usageStore, err := g.connectRedis(c, o.Now)
	if err != nil {
		return nil, err
	}
	if g.admission, err = admission.New(g.windows, g.limiter, g.inflight, g.slots); err != nil {
		return nil, err
	}
	// Usage buckets follow the wall clock (time.Now), not o.Now: they are
	// shared with other replicas and read by operators in real minutes.
	g.usage, err = usage.New(usage.Options{Store: usageStore, Interval: c.Usage.FlushInterval, MaxPending: usageMaxPending,
		OnFlush: g.hooks.UsageFlush, Names: g.usageNames})
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
	if g.subClient != nil {
		g.subscriber = auth.Subscribe(g.subClient, cache, g.log)
	}
	g.auth, err = auth.New(auth.Options{Prefixes: prefixes, Signer: signer, Cache: cache, Lookup: g.lookup, Now: o.Now, Usage: g.usage,
		MaxRefreshes: lookupMaxConns / 2})
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
	g.setupPlainHTTP(c)
	g.unread = g.newUnreadRouter()
	// WriteTimeout bounds a whole answer; a streamed report lifts it and is
	// bounded by progress instead (Serve's idleconn listener, proxy.Forward).
	// headerReceived sets each request's body limit from its headers (the
	// server's MaxRequestBodySize is then only the ceiling); ReadTimeout
	// bounds the headers, and headerReceived an order's body again.
	g.server = &fasthttp.Server{
		Handler:                       g.serve,
		ErrorHandler:                  g.serverError,
		HeaderReceived:                g.headerReceived,
		Name:                          "vendorgate",
		MaxRequestBodySize:            c.OrderBodyLimit(),
		ReadBufferSize:                wire.MaxRequestHead, // the one bound on a request's head: 431 past it
		ReadTimeout:                   c.ReadTimeout,
		WriteTimeout:                  c.Proxy.Timeout + writeSlack,
		IdleTimeout:                   idleTimeout,
		NoDefaultServerHeader:         true,
		DisableHeaderNamesNormalizing: false,
		// An idle keep-alive connection gives its read and write buffers
		// back to the pools (docs/tls.md: 46 KB against 140 KB a TLS
		// connection idle after GET /docs): max_conns is sized by it.
		ReduceMemoryUsage: true,
		CloseOnShutdown:   true,
		Logger:            serverlog.Printer{Log: g.log}, // never the request's bytes
	}
	po := probe.Options{Redis: g.limiterClient, RedisTimeout: c.Redis.Timeout, Backends: c.BackendURL, BackendTLS: hop,
		InternalToken: c.InternalToken, Logger: g.log, BackendTimeout: min(c.Proxy.Timeout, probeTimeoutMax),
		Interval: probeInterval, OnChange: g.outages.OnChange}
	if g.limiterClient == nil {
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
	g.admin = &fasthttp.Server{
		Handler: admin.Handler(admin.Options{Registry: g.metrics.Registry, Checks: checks, OpenAPI: o.OpenAPI,
			Usage: admin.UsageHandler(admin.UsageOptions{Token: c.AdminToken,
				Reader: &usage.Reader{Store: usageStore, Limits: g.usageLimits, Quotas: g.usageQuotas}}),
			Profiles: profiling.Handler(c.AdminToken, "vendorgate-gateway-admin", admin.GatewayAdminToken)}),
		Name:        "vendorgate-admin",
		IdleTimeout: adminIdleTimeout,
		ReadTimeout: adminReadTimeout,
		Logger:      serverlog.Printer{Log: g.log},
		// Its endpoints take no body (adminMaxBodyBytes says why).
		MaxRequestBodySize: adminMaxBodyBytes,
	}
	go g.pollBreakers(checks)
	return g, nil
}

// HTTPServerDuration is the http_server_request_duration_seconds histogram,
// for its export over OTLP (admin.StartOTLPMetrics).
func (g *Gateway) HTTPServerDuration() prometheus.Collector { return g.metrics.HTTPServerDuration }
