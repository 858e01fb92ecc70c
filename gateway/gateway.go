// Package gateway is vendorgate's edge: it routes, authenticates, throttles
// failed keys, admits by account state and exact rate limits, and proxies
// to the backend (flow.go, in the specification's order). Everything it
// needs arrives in Options; Reload swaps the settings that may change
// without a restart.
package gateway

import (
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
	"vendorgate/gateway/limit"
	"vendorgate/gateway/proxy"
	"vendorgate/gateway/respond"
	"vendorgate/gateway/throttle"
	"vendorgate/shared/apikey"
	"vendorgate/shared/idleconn"
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
	// MaxBodyBytes bounds a request body (413 past it). Default 1 MiB.
	MaxBodyBytes int
	// Settings are the reloadable settings in force at start.
	Settings Settings
	// Logger receives the access log and events. Default slog.Default().
	Logger *slog.Logger
	// OpenAPI is served on the admin listener when set.
	OpenAPI []byte
	// Now is the clock of key expiry and the in-process limiter; time.Now
	// when nil.
	Now func() time.Time
	// AccessLog writes one line per request. Default on; benchmarks turn it
	// off with DisableAccessLog.
	DisableAccessLog bool
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
	respond  *respond.Writer
	metrics  *admin.Metrics
	router   *router.Router
	server   *fasthttp.Server

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
	subscriber    *auth.Subscriber

	accessLog bool
	ridPrefix [9]byte // 8 hex characters and '-'
	ridSeq    atomic.Uint64
	draining  atomic.Bool

	closeOnce sync.Once
	stopPoll  chan struct{}
	pollDone  chan struct{}
}

// New builds a gateway: it connects nothing yet except Redis clients (which
// dial lazily), and starts the invalidation subscriber and the breaker
// poller, which Shutdown stops.
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
	if o.Proxy.StreamIdleTimeout <= 0 {
		o.Proxy.StreamIdleTimeout = 30 * time.Second
	}
	sn, err := compile(o.Settings)
	if err != nil {
		return nil, fmt.Errorf("gateway settings: %w", err)
	}
	g := &Gateway{log: o.Logger, accessLog: !o.DisableAccessLog, streamIdle: o.Proxy.StreamIdleTimeout, stopPoll: make(chan struct{}), pollDone: make(chan struct{})}
	g.snap.Store(sn)
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
	cache := auth.NewCache(auth.CacheOptions{Size: o.KeyCache.Size, TTL: o.KeyCache.TTL, NegativeTTL: o.KeyCache.NegativeTTL, Now: o.Now})
	g.metrics.RegisterKeyCache(func() (uint64, uint64, uint64, uint64) {
		s := cache.Stats()
		return s.Hits, s.Misses, s.Evictions, s.Invalidations
	})
	g.auth, err = auth.New(auth.Options{Prefixes: o.Prefixes, Cache: cache, Lookup: g.lookup, Now: o.Now})
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

	if len(o.Redis.URLs) == 0 {
		g.limiter = limit.NewLocal(limit.LocalOptions{Now: o.Now})
		g.throttle = throttle.NewLocal(o.Now)
		g.log.Info("rate limiter: in-process GCRA (no Redis configured): limits hold for this single gateway instance only")
	} else {
		if err := g.connectRedis(o, onState, cache); err != nil {
			return nil, err
		}
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
		Logger:                        slogPrinter{g.log},
	}
	g.admin = &fasthttp.Server{
		Handler:     admin.Handler(admin.Options{Registry: g.metrics.Registry, Ready: g.unready, OpenAPI: o.OpenAPI}),
		Name:        "vendorgate-admin",
		IdleTimeout: 30 * time.Second,
		ReadTimeout: 10 * time.Second,
	}
	go g.pollBreakers()
	return g, nil
}

// connectRedis builds the limiter's client (fail fast: no retries, small
// timeouts) and the subscriber's (ordinary timeouts), the Redis limiter
// and the shared throttle.
func (g *Gateway) connectRedis(o Options, onState func(string, gobreaker.State, gobreaker.State), cache *auth.Cache) error {
	uo, err := universalOptions(o.Redis)
	if err != nil {
		return err
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
	g.redisLim, err = limit.NewRedis(limit.RedisOptions{Client: g.limiterClient, Timeout: o.Redis.Timeout,
		BreakerOpenFor: o.Redis.BreakerOpenFor, BreakerFailures: o.Redis.BreakerFailures, OnStateChange: onState,
		Now: o.Now, Pipeline: !o.Redis.DisablePipeline, ObserveCall: func(d time.Duration, err error) {
			g.metrics.RedisCallDuration.Observe(d.Seconds())
			if err != nil {
				g.metrics.RedisErrors.Inc()
			}
		}})
	if err != nil {
		return err
	}
	g.limiter = g.redisLim
	g.throttle = throttle.NewRedis(g.limiterClient, o.Redis.Timeout)
	g.subscriber = auth.Subscribe(g.subClient, cache, g.log)
	g.log.Info("rate limiter: Redis", "addrs", strings.Join(uo.Addrs, ","), "sentinel_master", uo.MasterName, "timeout", o.Redis.Timeout.String())
	return nil
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
func (g *Gateway) pollBreakers() {
	defer close(g.pollDone)
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		g.eachBreaker(func(name string, s gobreaker.State) {
			g.metrics.BreakerState.WithLabelValues(name).Set(float64(s))
		})
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

// unready names the parts that keep the gateway from serving: draining,
// Redis (its breaker open), or every backend's breaker open.
func (g *Gateway) unready() []string {
	var out []string
	if g.draining.Load() {
		out = append(out, "draining")
	}
	if g.redisLim != nil && g.redisLim.State() == gobreaker.StateOpen {
		out = append(out, "redis")
	}
	open, total := 0, 0
	g.proxy.Breakers(func(name string, s gobreaker.State) {
		total++
		if s == gobreaker.StateOpen {
			open++
			out = append(out, name)
		}
	})
	if open > 0 && open < total {
		out = out[:len(out)-open] // another backend serves: ready
	}
	if g.lookup.State() == gobreaker.StateOpen {
		out = append(out, backendapi.BreakerName)
	}
	return out
}

// slogPrinter routes fasthttp's own log lines to slog.
type slogPrinter struct{ log *slog.Logger }

func (p slogPrinter) Printf(format string, args ...any) {
	p.log.Warn("fasthttp", "msg", fmt.Sprintf(format, args...))
}
