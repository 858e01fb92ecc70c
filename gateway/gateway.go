// Package gateway is vendorgate's edge: it routes, authenticates, throttles
// failed keys, admits by account state and exact rate limits, and proxies
// to the backend (flow.go, in the specification's order). Everything it
// needs arrives in Options; Reload swaps the settings that may change
// without a restart.
package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fasthttp/router"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
	"github.com/valyala/fasthttp"

	"vendorgate/gateway/admin"
	"vendorgate/gateway/auth"
	"vendorgate/gateway/backendapi"
	"vendorgate/gateway/docs"
	"vendorgate/gateway/limit"
	"vendorgate/gateway/probe"
	"vendorgate/gateway/proxy"
	"vendorgate/gateway/respond"
	"vendorgate/gateway/throttle"
	"vendorgate/gateway/usage"
	"vendorgate/shared/apikey"
	"vendorgate/shared/idleconn"
	"vendorgate/shared/readyz"
	"vendorgate/shared/serverlog"
)

// RedisOptions selects and tunes the limiter's Redis. No URLs: the
// in-process limiter (one gateway instance).
type RedisOptions struct {
	// URLs: one redis:// URL for a server; several for a Cluster; with
	// MasterName, the Sentinels.
	URLs       []string
	MasterName string
	// Timeout bounds one limiter call. Default 50ms.
	Timeout time.Duration
	// PoolSize of the limiter's client. Default 64.
	PoolSize int
	// BreakerOpenFor and BreakerFailures tune the limiter's breaker.
	// Defaults 2s and 3.
	BreakerOpenFor  time.Duration
	BreakerFailures int
	// DisablePipeline turns off auto-pipelining of limiter calls (on by
	// default: concurrent requests share one pipelined round trip, see
	// limit.RedisOptions.Pipeline); each request then makes its own.
	DisablePipeline bool
}

// ProxyOptions tune backend calls.
type ProxyOptions struct {
	// Timeout bounds one backend call (504 past it); for a streamed report,
	// the wait for the backend's answer to begin. Default 10s.
	Timeout time.Duration
	// StreamIdleTimeout bounds a streamed report by progress on both legs:
	// the backend may pause sending, and the client reading, this long; the
	// whole download takes as long as bytes keep moving. Default 30s.
	StreamIdleTimeout time.Duration
	// MaxConns bounds connections per backend. Default 512.
	MaxConns int
	// BreakerOpenFor and BreakerFailures tune each backend's breaker.
	// Defaults 5s and 5.
	BreakerOpenFor  time.Duration
	BreakerFailures int
}

// Options is everything New needs.
type Options struct {
	// Backends are the backends' base URLs.
	Backends      []string
	InternalToken string
	Prefixes      apikey.Prefixes
	Redis         RedisOptions
	KeyCache      auth.CacheOptions
	Proxy         ProxyOptions
	// KeySigningSecrets verify the MAC of every presented key: any of them
	// verifies. Required.
	KeySigningSecrets []string
	// MaxBodyBytes bounds a request body (413 past it). Default 1 MiB.
	MaxBodyBytes int
	// FailedKeysTracked bounds the in-process failed-key counts, per
	// address and per key (throttle.LocalOptions.MaxTracked). Default
	// 100000 each.
	FailedKeysTracked int
	// Settings are the reloadable settings in force at start.
	Settings Settings
	// Logger receives the access log and events. Default slog.Default().
	Logger *slog.Logger
	// OpenAPI is served on the admin listener when set, and rendered for
	// vendors on the public listener (/docs, /openapi.yaml, /openapi.json).
	OpenAPI []byte
	// Docs configure the public documentation routes.
	Docs DocsOptions
	// Now is the clock of key expiry and the in-process limiter; time.Now
	// when nil.
	Now func() time.Time
	// AccessLog writes one line per request. Default on; benchmarks turn it
	// off with DisableAccessLog.
	DisableAccessLog bool
	// AdminToken guards the usage view on the admin listener; empty turns
	// the view off.
	AdminToken string
	// UsageFlushInterval is how often per-vendor usage counts are flushed
	// (to Redis, shared by the replicas; in process without Redis).
	// Default 5s.
	UsageFlushInterval time.Duration
}

// limiter is what the flow needs of a rate limiter.
type limiter interface {
	Allow(cs limit.Checks) (limit.Decision, error)
}

// Gateway is one gateway instance.
type Gateway struct {
	log      *slog.Logger
	snap     atomic.Pointer[snapshot]
	auth     *auth.Authenticator
	lookup   *backendapi.Client
	limiter  limiter
	redisLim *limit.Redis // nil with the in-process limiter
	throttle *throttle.Throttle
	proxy    *proxy.Proxy
	probe    *probe.Prober
	respond  *respond.Writer
	metrics  *admin.Metrics
	router   *router.Router
	server   *fasthttp.Server

	// The documentation routes: rendered at start and on Reload.
	docs         atomic.Pointer[docs.Set]
	docsLimiter  *limit.Local
	docsOpts     DocsOptions
	openAPI      []byte
	prefixes     apikey.Prefixes
	maxBodyBytes int

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

	limiterClient redis.UniversalClient
	subClient     redis.UniversalClient
	usageClient   redis.UniversalClient // its own pool: flushes never wait for, or delay, a limiter call
	subscriber    *auth.Subscriber
	usage         *usage.Recorder

	accessLog bool
	ridPrefix [9]byte // 8 hex characters and '-'
	ridSeq    atomic.Uint64
	draining  atomic.Bool

	closeOnce sync.Once
	stopPoll  chan struct{}
	pollDone  chan struct{}
}

// New builds a gateway: it starts the invalidation subscriber, the breaker
// poller and the readiness prober (which Shutdown stops), and returns once
// the prober has a first verdict on Redis and every backend.
func New(o Options) (*Gateway, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 1 << 20
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Redis.Timeout <= 0 {
		o.Redis.Timeout = 50 * time.Millisecond
	}
	if o.Redis.PoolSize <= 0 {
		o.Redis.PoolSize = 64
	}
	if o.Docs.PublicBaseURL == "" {
		o.Docs.PublicBaseURL = "http://localhost:8080"
	}
	if o.Docs.Rate <= 0 {
		o.Docs.Rate = 60
	}
	if o.Docs.Window <= 0 {
		o.Docs.Window = time.Minute
	}
	if o.Proxy.StreamIdleTimeout <= 0 {
		o.Proxy.StreamIdleTimeout = 30 * time.Second
	}
	sn, err := compile(o.Settings)
	if err != nil {
		return nil, fmt.Errorf("gateway settings: %w", err)
	}
	g := &Gateway{log: o.Logger, accessLog: !o.DisableAccessLog, streamIdle: o.Proxy.StreamIdleTimeout, stopPoll: make(chan struct{}), pollDone: make(chan struct{})}
	g.snap.Store(sn)
	g.docsOpts, g.openAPI, g.prefixes, g.maxBodyBytes = o.Docs, o.OpenAPI, o.Prefixes, o.MaxBodyBytes
	g.docsLimiter = limit.NewLocal(limit.LocalOptions{Now: o.Now})
	if err := g.renderDocs(sn); err != nil {
		return nil, err
	}
	var seed [4]byte
	_, _ = rand.Read(seed[:])
	hex.Encode(g.ridPrefix[:8], seed[:])
	g.ridPrefix[8] = '-'

	g.metrics = admin.NewMetrics(routeLabels())
	g.metrics.ConfigInfo.WithLabelValues(o.Settings.Version).Set(1)
	onState := func(name string, from, to gobreaker.State) {
		g.metrics.BreakerTransitions.WithLabelValues(name, from.String(), to.String()).Inc()
		g.metrics.BreakerState.WithLabelValues(name).Set(float64(to))
		g.log.Warn("breaker state change", "breaker", name, "from", from.String(), "to", to.String())
	}

	g.lookup, err = backendapi.New(backendapi.Options{Backends: o.Backends, InternalToken: o.InternalToken,
		Timeout: min(o.Proxy.Timeout, 2*time.Second), MaxConns: 64, BreakerOpenFor: o.Proxy.BreakerOpenFor,
		BreakerFailures: o.Proxy.BreakerFailures, OnStateChange: onState})
	if err != nil {
		return nil, err
	}
	signer, err := apikey.NewSigner(o.KeySigningSecrets)
	if err != nil {
		return nil, fmt.Errorf("gateway: key signing secrets: %w", err)
	}
	usageStore, err := g.connectRedis(o, onState)
	if err != nil {
		return nil, err
	}
	// Usage buckets follow the wall clock (time.Now), not o.Now: they are
	// shared with other replicas and read by operators in real minutes.
	g.usage = usage.New(usage.Options{Store: usageStore, Interval: o.UsageFlushInterval,
		OnFlush: func(err error, pending, dropped int) {
			g.metrics.UsagePending.Set(float64(pending))
			g.metrics.UsageDropped.Add(float64(dropped))
			if err != nil {
				g.metrics.UsageFlushes.WithLabelValues("error").Inc()
				g.log.Warn("usage flush failed; kept for the next flush", "pending", pending, "err", err)
				return
			}
			g.metrics.UsageFlushes.WithLabelValues("ok").Inc()
		}})
	kc := o.KeyCache
	kc.Now = o.Now
	cache := auth.NewCache(kc)
	g.metrics.RegisterKeyCache(func() (uint64, uint64, uint64, uint64) {
		s := cache.Stats()
		return s.Hits, s.Misses, s.Evictions, s.Invalidations
	})
	if g.subClient != nil {
		g.subscriber = auth.Subscribe(g.subClient, cache, g.log)
	}
	g.auth, err = auth.New(auth.Options{Prefixes: o.Prefixes, Signer: signer, Cache: cache, Lookup: g.lookup, Now: o.Now, Usage: g.usage})
	if err != nil {
		return nil, err
	}
	observers := make([]prometheus.Observer, len(o.Backends))
	for i, b := range o.Backends {
		u, err := url.Parse(b)
		if err != nil {
			return nil, fmt.Errorf("backend url %q: %w", b, err)
		}
		observers[i] = g.metrics.UpstreamDuration.WithLabelValues(u.Host)
	}
	g.proxy, err = proxy.New(proxy.Options{Backends: o.Backends, InternalToken: o.InternalToken, Timeout: o.Proxy.Timeout,
		StreamIdleTimeout: o.Proxy.StreamIdleTimeout, MaxConns: o.Proxy.MaxConns, BreakerOpenFor: o.Proxy.BreakerOpenFor, BreakerFailures: o.Proxy.BreakerFailures,
		OnStateChange: onState, ObserveUpstream: func(i int, d time.Duration) { observers[i].Observe(d.Seconds()) }})
	if err != nil {
		return nil, err
	}

	g.respond = respond.NewWriter(cannedErrors()...)
	g.router = g.newRouter()
	// WriteTimeout bounds a whole answer; a streamed report lifts it and is
	// bounded by progress instead (Serve's idleconn listener, proxy.Forward).
	g.server = &fasthttp.Server{
		Handler:                       g.serve,
		ErrorHandler:                  g.serverError,
		Name:                          "vendorgate",
		MaxRequestBodySize:            o.MaxBodyBytes,
		ReadBufferSize:                8192,
		ReadTimeout:                   30 * time.Second,
		WriteTimeout:                  o.Proxy.Timeout + 30*time.Second,
		IdleTimeout:                   60 * time.Second,
		NoDefaultServerHeader:         true,
		DisableHeaderNamesNormalizing: false,
		CloseOnShutdown:               true,
		Logger:                        serverlog.Printer{Log: g.log}, // never the request's bytes
	}
	po := probe.Options{Redis: g.limiterClient, RedisTimeout: o.Redis.Timeout, Backends: o.Backends,
		InternalToken: o.InternalToken, Logger: g.log}
	if o.Proxy.Timeout > 0 {
		po.BackendTimeout = min(o.Proxy.Timeout, time.Second)
	}
	if g.limiterClient == nil {
		po.Redis = nil // a nil client in the interface would read as set
	}
	g.probe, err = probe.New(po)
	if err != nil {
		return nil, err
	}
	g.admin = &fasthttp.Server{
		Handler: admin.Handler(admin.Options{Registry: g.metrics.Registry, Checks: g.readyChecks(), OpenAPI: o.OpenAPI,
			Usage: admin.UsageHandler(admin.UsageOptions{Token: o.AdminToken,
				Reader: &usage.Reader{Store: usageStore, Limits: g.usageLimits}})}),
		Name:        "vendorgate-admin",
		IdleTimeout: 30 * time.Second,
		ReadTimeout: 10 * time.Second,
		Logger:      serverlog.Printer{Log: g.log},
		// Its endpoints take no body; fasthttp would otherwise set aside
		// memory for any announced up to 4 MiB, and wait for it.
		MaxRequestBodySize: 4 << 10,
	}
	go g.pollBreakers()
	return g, nil
}

// connectRedis builds the limiter's client (fail fast: no retries, small
// timeouts), the subscriber's and the usage store's (ordinary timeouts),
// the Redis limiter and the shared throttle; without Redis URLs, the
// in-process limiter, throttle and usage store.
func (g *Gateway) connectRedis(o Options, onState func(string, gobreaker.State, gobreaker.State)) (usage.Store, error) {
	if len(o.Redis.URLs) == 0 {
		g.limiter = limit.NewLocal(limit.LocalOptions{Now: o.Now})
		g.throttle = throttle.NewLocal(throttle.LocalOptions{Now: o.Now, MaxTracked: o.FailedKeysTracked})
		g.log.Info("rate limiter: in-process GCRA (no Redis configured): limits hold for this single gateway instance only")
		return usage.NewLocal(nil), nil
	}
	uo, err := universalOptions(o.Redis)
	if err != nil {
		return nil, err
	}
	sub := *uo
	uo.MaxRetries = -1 // a retried EVALSHA can charge a bucket twice
	uo.DialerRetries = 1
	uo.ContextTimeoutEnabled = true
	uo.DialTimeout = max(o.Redis.Timeout, 100*time.Millisecond)
	uo.ReadTimeout = max(o.Redis.Timeout, 10*time.Millisecond)
	uo.WriteTimeout = uo.ReadTimeout
	uo.PoolSize = max(o.Redis.PoolSize, 1)
	uo.MinIdleConns = min(uo.PoolSize, 8)
	uo.PoolTimeout = max(o.Redis.Timeout, 10*time.Millisecond)
	g.limiterClient = redis.NewUniversalClient(uo)
	sub.PoolSize = 4
	g.subClient = redis.NewUniversalClient(&sub)
	uc := sub
	uc.PoolSize = 2
	uc.MaxRetries = -1 // a flush is retried by the recorder, once-only by its guard
	g.usageClient = redis.NewUniversalClient(&uc)
	g.redisLim, err = limit.NewRedis(limit.RedisOptions{Client: g.limiterClient, Timeout: o.Redis.Timeout,
		BreakerOpenFor: o.Redis.BreakerOpenFor, BreakerFailures: o.Redis.BreakerFailures, OnStateChange: onState,
		Now: o.Now, Pipeline: !o.Redis.DisablePipeline, ObserveCall: func(d time.Duration, err error) {
			g.metrics.RedisCallDuration.Observe(d.Seconds())
			if err != nil {
				g.metrics.RedisErrors.Inc()
			}
		}})
	if err != nil {
		return nil, err
	}
	g.limiter = g.redisLim
	g.throttle = throttle.NewRedis(throttle.RedisOptions{Client: g.limiterClient, Timeout: o.Redis.Timeout, Now: o.Now})
	g.log.Info("rate limiter: Redis", "addrs", strings.Join(uo.Addrs, ","), "sentinel_master", uo.MasterName, "timeout", o.Redis.Timeout.String())
	return usage.NewRedis(usage.RedisOptions{Client: g.usageClient})
}

// universalOptions turns redis:// URLs into go-redis options: one URL a
// server, several a Cluster, MasterName a Sentinel set.
func universalOptions(o RedisOptions) (*redis.UniversalOptions, error) {
	uo := &redis.UniversalOptions{MasterName: o.MasterName}
	for i, s := range o.URLs {
		opt, err := redis.ParseURL(s)
		if err != nil {
			u, _ := url.Parse(s)
			host := ""
			if u != nil {
				host = u.Host
			}
			return nil, fmt.Errorf("redis url %d (%s): %w", i+1, host, err)
		}
		uo.Addrs = append(uo.Addrs, opt.Addr)
		if i == 0 {
			uo.Username, uo.Password, uo.DB, uo.TLSConfig = opt.Username, opt.Password, opt.DB, opt.TLSConfig
		}
	}
	if o.MasterName == "" && len(uo.Addrs) > 1 {
		uo.IsClusterMode = true
	}
	return uo, nil
}

// Serve serves the public API on pub and the admin endpoints on adm until
// Shutdown. It returns the first serving error.
func (g *Gateway) Serve(pub, adm net.Listener) error {
	g.servedMu.Lock()
	if g.shut {
		g.servedMu.Unlock()
		_ = pub.Close()
		_ = adm.Close()
		return nil
	}
	g.served = []net.Listener{pub, adm}
	g.servedMu.Unlock()
	pub = idleconn.NewListener(pub, idleconn.Options{Idle: g.streamIdle})
	go func() {
		if err := g.admin.Serve(adm); err != nil {
			g.log.Error("admin listener stopped", "err", err)
		}
	}()
	return g.server.Serve(pub)
}

// Shutdown turns /readyz unready, stops accepting, waits for in-flight
// requests until grace has passed, then closes Redis clients, the
// subscriber and the backend pools.
func (g *Gateway) Shutdown(delay, grace time.Duration) error {
	g.draining.Store(true)
	// Stay in rotation for delay while /readyz says unready, so that a load
	// balancer stops sending before the listener closes; answers in that time
	// ask clients to close their keep-alive connections (see finish).
	if delay > 0 {
		time.Sleep(delay)
	}
	done := make(chan error, 1)
	go func() { done <- g.server.Shutdown() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(grace):
		err = errors.New("shutdown grace passed with requests in flight")
	}
	_ = g.admin.Shutdown()
	g.servedMu.Lock()
	g.shut = true
	for _, ln := range g.served {
		_ = ln.Close() // already closed by fasthttp unless Serve had not begun
	}
	g.servedMu.Unlock()
	g.Close()
	return err
}

// Close releases what New started; Shutdown calls it.
func (g *Gateway) Close() {
	g.closeOnce.Do(func() {
		close(g.stopPoll)
		<-g.pollDone
		g.probe.Close()
		g.usage.Close() // the last flush, before the clients close
		if g.usageClient != nil {
			_ = g.usageClient.Close()
		}
		if g.subscriber != nil {
			_ = g.subscriber.Close()
		}
		if g.subClient != nil {
			_ = g.subClient.Close()
		}
		if g.redisLim != nil {
			g.redisLim.Close()
		}
		if g.limiterClient != nil {
			_ = g.limiterClient.Close()
		}
		g.proxy.Close()
	})
}

// Reload validates s and swaps it in; requests in flight finish under the
// settings they started with. A refused s leaves the old settings.
func (g *Gateway) Reload(s Settings) error {
	sn, err := compile(s)
	if err != nil {
		g.metrics.ConfigReloads.WithLabelValues("error").Inc()
		return fmt.Errorf("reload: %w", err)
	}
	old := g.snap.Swap(sn)
	g.metrics.ConfigReloads.WithLabelValues("ok").Inc()
	if err := g.renderDocs(sn); err != nil {
		g.log.Error("documentation not re-rendered; the previous page stays", "err", err)
	}
	if old.settings.Version != s.Version {
		g.metrics.ConfigInfo.DeleteLabelValues(old.settings.Version)
	}
	g.metrics.ConfigInfo.WithLabelValues(s.Version).Set(1)
	return nil
}

// ReloadFailed counts a reload refused before it reached Reload (the file
// did not load).
func (g *Gateway) ReloadFailed() { g.metrics.ConfigReloads.WithLabelValues("error").Inc() }

// Handler is the public handler, for benchmarks and tests that drive it
// without a listener.
func (g *Gateway) Handler() fasthttp.RequestHandler { return g.serve }

// pollBreakers keeps the breaker state gauge current: gobreaker moves open
// to half-open only when asked, so an idle breaker would read open forever.
// It keeps the readiness gauge (the full /readyz, nothing excluded) current
// too, for the alerts and the dashboard.
func (g *Gateway) pollBreakers() {
	defer close(g.pollDone)
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	checks := g.readyChecks()
	for {
		g.eachBreaker(func(name string, s gobreaker.State) {
			g.metrics.BreakerState.WithLabelValues(name).Set(float64(s))
		})
		for _, r := range readyz.Run(context.Background(), checks, readyz.Query{}).Results {
			passing := 0.0
			if r.Status == readyz.StatusOK {
				passing = 1
			}
			g.metrics.Ready.WithLabelValues(r.Name).Set(passing)
		}
		select {
		case <-g.stopPoll:
			return
		case <-t.C:
		}
	}
}

func (g *Gateway) eachBreaker(fn func(name string, s gobreaker.State)) {
	if g.redisLim != nil {
		fn(limit.BreakerName, g.redisLim.State())
	}
	fn(backendapi.BreakerName, g.lookup.State())
	g.proxy.Breakers(fn)
}

// The names of /readyz's checks (?exclude=NAME leaves one out).
const (
	checkDraining = "draining"
	checkRedis    = "redis"
	checkBackend  = "backend"
)

// readyChecks are /readyz's checks: draining (SIGTERM received), redis
// (with a Redis limiter: the prober's PING answered and the limiter's
// breaker not open), backend (at least one backend answers the prober and
// its breaker is not open, and the key-lookup breaker is not open). Redis
// and the backends are shared by every replica, so a load balancer's probe
// excludes them (README, "Readiness").
func (g *Gateway) readyChecks() []readyz.Check {
	checks := []readyz.Check{{Name: checkDraining, Run: func(context.Context) error {
		if g.draining.Load() {
			return errors.New("shutting down")
		}
		return nil
	}}}
	if g.redisLim != nil {
		checks = append(checks, readyz.Check{Name: checkRedis, Run: func(context.Context) error {
			if err := g.probe.Redis(); err != nil {
				return err
			}
			if g.redisLim.State() == gobreaker.StateOpen {
				return errors.New("limiter breaker open")
			}
			return nil
		}})
	}
	return append(checks, readyz.Check{Name: checkBackend, Run: g.checkBackends})
}

// checkBackends is ready while any backend is: a gateway with one backend of
// two still serves every request. The ones down are the reason shown.
func (g *Gateway) checkBackends(context.Context) error {
	var down []string
	i, total := 0, 0
	g.proxy.Breakers(func(name string, s gobreaker.State) {
		switch err := g.probe.Backend(i); {
		case err != nil:
			down = append(down, err.Error())
		case s == gobreaker.StateOpen:
			down = append(down, strings.TrimPrefix(name, "backend:")+": breaker open")
		}
		i++
		total++
	})
	if g.lookup.State() == gobreaker.StateOpen {
		return errors.New(strings.Join(append([]string{"key lookup breaker open"}, down...), "; "))
	}
	switch {
	case len(down) == total:
		return errors.New(strings.Join(down, "; "))
	case len(down) > 0:
		return readyz.Degraded(errors.New(strings.Join(down, "; ")))
	}
	return nil
}
