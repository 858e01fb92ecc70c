package admin

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are the gateway's Prometheus metrics (names: docs/CONTRACTS.md),
// in their own registry.
type Metrics struct {
	Registry        *prometheus.Registry
	requests        *prometheus.CounterVec
	RequestDuration *prometheus.HistogramVec
	// HTTPServerDuration is OpenTelemetry's http.server.request.duration
	// (semantic conventions for HTTP servers) as Prometheus names it.
	HTTPServerDuration *prometheus.HistogramVec
	UpstreamDuration   *prometheus.HistogramVec
	LimiterDecisions   *prometheus.CounterVec
	RedisCallDuration  prometheus.Histogram
	RedisErrors        *prometheus.CounterVec
	RedisUnsent        prometheus.Counter
	RedisBreakerTrips  *prometheus.CounterVec
	LimiterShed        prometheus.Counter
	// BucketsCharged counts the buckets the limiter's Redis script charged
	// (a request's own token and its lease's, one count a bucket a call).
	BucketsCharged prometheus.Counter
	// LeaseAdmissions counts requests admitted from a lease, without
	// asking Redis; LeaseTokens the leased tokens by event.
	LeaseAdmissions prometheus.Counter
	LeaseTokens     *prometheus.CounterVec
	// Refunds counts the buckets of requests the gateway failed for the
	// backend under a refunding policy, by outcome: given_back, or kept
	// (past the refund cap, or the token's lease already sent back).
	Refunds *prometheus.CounterVec
	// NodeSchedLateness is the node's recent scheduling lateness as the
	// Redis limiter measures it (its 5ms tick's largest delay).
	NodeSchedLateness prometheus.Gauge
	// RedisSilenceGrace is the time a silent Redis is given on top of
	// redis.timeout: its slowest answer of the last second.
	RedisSilenceGrace  prometheus.Gauge
	BreakerState       *prometheus.GaugeVec
	BreakerTransitions *prometheus.CounterVec
	// Ready is each /readyz check in the full form (nothing excluded): 1
	// passing, 0 failing, kept current while idle.
	Ready        *prometheus.GaugeVec
	AuthFailures *prometheus.CounterVec
	// ThrottleLocal counts the failed keys the Redis throttle counted in
	// process, by reason; ThrottleInProcess is 1 from its first fallback
	// until it counts in Redis again.
	ThrottleLocal     *prometheus.CounterVec
	ThrottleInProcess prometheus.Gauge
	ConfigInfo        *prometheus.GaugeVec
	ConfigReloads     *prometheus.CounterVec
	UsageFlushes      *prometheus.CounterVec
	UsagePending      prometheus.Gauge
	UsageDropped      prometheus.Counter
	UsagePendingBytes prometheus.Gauge
	UsageDroppedReqs  prometheus.Counter

	// answered caches the children of requests_total and
	// http_server_request_duration_seconds by route index, method index and
	// status class, so that counting a request does not hash label values.
	// A class's table is made at its first request: a gateway holds tables
	// only for the routes, methods and classes it answered (every table
	// made up front was 224 KB of live heap, most of a small gateway's own).
	answered        []atomic.Pointer[statusClass]
	routes, methods []string
	// durations are RequestDuration's children by route index.
	durations []prometheus.Observer
	// decisions are LimiterDecisions' counters by limit name (a handful,
	// from the settings), the same for a name across reloads: the gateway
	// resolves them when it compiles its policy table, so that counting a
	// decision neither reads a map nor hashes label values.
	decisions   map[string]*Decisions
	decisionsMu sync.Mutex
}

// Outcome is a limiter decision's outcome label.
type Outcome uint8

// Outcomes of vendorgate_gateway_limiter_decisions_total.
const (
	Allowed Outcome = iota
	Limited
	Unavailable
	ShadowLimited
	outcomes
)

var outcomeLabels = [outcomes]string{"allowed", "limited", "unavailable", "shadow_limited"}

// Methods counted by name; any other is counted as "other".
var countedMethods = []string{"GET", "POST", "other"}

// NewMetrics registers every metric. routes are the route labels (the
// router patterns and "unmatched"), indexed as the gateway indexes them.
func NewMetrics(routes []string) *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		Registry: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vendorgate_gateway_requests_total",
			Help: "Requests answered, by route pattern, method and status."}, []string{"route", "method", "status"}),
		RequestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "vendorgate_gateway_request_duration_seconds",
			Help: "Time to answer a request (to the response headers).", Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 14)}, []string{"route"}),
		HTTPServerDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "http_server_request_duration_seconds",
			Help:    "Duration of HTTP server requests (OpenTelemetry's http.server.request.duration, to the response headers), by route pattern, method, status code and error type (the status code of a 5xx answer).",
			Buckets: OTelDurationBuckets}, []string{"http_route", "http_request_method", "http_response_status_code", "error_type"}),
		UpstreamDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "vendorgate_gateway_upstream_duration_seconds",
			Help: "Time of a backend call, by backend.", Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 14)}, []string{"backend"}),
		LimiterDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vendorgate_gateway_limiter_decisions_total",
			Help: "Rate limit decisions by limit and outcome (allowed, limited, unavailable, shadow_limited)."}, []string{"limit", "outcome"}),
		RedisCallDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "vendorgate_gateway_redis_call_duration_seconds",
			Help: "Time of a limiter call to Redis.", Buckets: prometheus.ExponentialBuckets(0.00005, 2, 14)}),
		RedisErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vendorgate_gateway_redis_errors_total",
			Help: "Limiter round trips to Redis that failed (a pipelined batch is one, and so is a lease heartbeat, which drops the leases), by kind: timeout (no answer within redis.wire_timeout; a heartbeat: within redis.timeout and the silence grace), connection (refused, reset, closed), script (an error reply)."}, []string{"kind"}),
		RedisUnsent: prometheus.NewCounter(prometheus.CounterOpts{Name: "vendorgate_gateway_redis_unsent_total",
			Help: "Limiter calls given up before they were sent to Redis (their requests failed, uncharged): the gateway was behind or Redis silent."}),
		RedisBreakerTrips: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vendorgate_gateway_redis_breaker_trips_total",
			Help: "Times the limiter's breaker opened, by the kind of the Redis failure that opened it (timeout, connection, script)."}, []string{"cause"}),
		LimiterShed: prometheus.NewCounter(prometheus.CounterOpts{Name: "vendorgate_gateway_limiter_shed_total",
			Help: "Requests shed with 503 request_failed because the gateway could not get their limit decided within redis.busy_timeout while Redis was answering (the node is past its capacity)."}),
		BucketsCharged: prometheus.NewCounter(prometheus.CounterOpts{Name: "vendorgate_gateway_limiter_buckets_charged_total",
			Help: "Buckets charged in Redis by the limiter's script: one per bucket of each allowed call, whether it took the request's own token alone or a lease with it. Divided by the allowed decisions, what leases save."}),
		LeaseAdmissions: prometheus.NewCounter(prometheus.CounterOpts{Name: "vendorgate_gateway_limiter_lease_admissions_total",
			Help: "Requests admitted from this gateway's leases without a Redis call."}),
		LeaseTokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vendorgate_gateway_limiter_lease_tokens_total",
			Help: "Leased tokens by event: granted (charged in Redis beyond the requests' own), refunded (unused, sent back at expiry, reload or shutdown), dropped (lost until the bucket refills: with a Redis failure, or given back by a refused request after their lease was sent back)."}, []string{"event"}),
		Refunds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vendorgate_gateway_limiter_refunds_total",
			Help: "Buckets of requests the gateway failed for the backend (a 5xx answer, a 504) under a policy with refund_failures, by outcome: given_back (the request's tokens went back), kept (charged still: past the refund cap, a tenth of the burst a minute per bucket at each gateway, or the token's lease already sent back)."}, []string{"outcome"}),
		NodeSchedLateness: prometheus.NewGauge(prometheus.GaugeOpts{Name: "vendorgate_gateway_node_sched_lateness_seconds",
			Help: "How late the gateway's goroutines woke at most over about the last second (a 5ms tick, limiter callers' timers). Above redis.tick_slack the node is late: it leaves the verdict on a silent Redis to redis.wire_timeout. About 0 on a quiet node; with a Redis limiter only."}),
		RedisSilenceGrace: prometheus.NewGauge(prometheus.GaugeOpts{Name: "vendorgate_gateway_redis_silence_grace_seconds",
			Help: "How much longer than redis.timeout a silent Redis is waited for before requests answer 503 rate_limit_unavailable, on a node that ran on time through the last second: the slowest answer Redis gave in that second, at most redis.busy_timeout - redis.timeout. With a Redis limiter only."}),
		BreakerState: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "vendorgate_gateway_breaker_state",
			Help: "Circuit breaker state: 0 closed, 1 half-open, 2 open (gobreaker's state names)."}, []string{"breaker"}),
		BreakerTransitions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vendorgate_gateway_breaker_transitions_total",
			Help: "Circuit breaker transitions."}, []string{"breaker", "from", "to"}),
		Ready: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "vendorgate_gateway_ready",
			Help: "Readiness checks of /readyz, nothing excluded: 1 passing, 0 failing."}, []string{"check"}),
		AuthFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vendorgate_gateway_auth_failures_total",
			Help: "Refused keys by reason."}, []string{"reason"}),
		ThrottleLocal: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vendorgate_gateway_failed_key_throttle_local_total",
			Help: "Failed keys the Redis failed-key throttle counted in process, by reason (busy: its connections all in use; error: the call failed; redis_down: the limiter finds Redis down), or in the hold after one."}, []string{"reason"}),
		ThrottleInProcess: prometheus.NewGauge(prometheus.GaugeOpts{Name: "vendorgate_gateway_failed_key_throttle_in_process",
			Help: "1 while the Redis failed-key throttle counts in process (from its first fallback until Redis counts again), else 0."}),
		ConfigInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "vendorgate_gateway_config_info",
			Help: "The configuration version in force (1)."}, []string{"version"}),
		ConfigReloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vendorgate_gateway_config_reloads_total",
			Help: "Configuration reloads by result (ok, error)."}, []string{"result"}),
		UsageFlushes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vendorgate_gateway_usage_flushes_total",
			Help: "Flushes of per-vendor usage counts to their store, by result (ok, error)."}, []string{"result"}),
		UsagePending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "vendorgate_gateway_usage_pending_flushes",
			Help: "Usage flushes kept for a retry because the store did not take them."}),
		UsageDropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "vendorgate_gateway_usage_dropped_flushes_total",
			Help: "Usage flushes dropped after too long a store outage, or past the retry queue's memory bound (their counts are lost)."}),
		UsagePendingBytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "vendorgate_gateway_usage_pending_bytes",
			Help: "Memory held by the usage flushes kept for a retry, every store's queue summed."}),
		UsageDroppedReqs: prometheus.NewCounter(prometheus.CounterOpts{Name: "vendorgate_gateway_usage_dropped_requests_total",
			Help: "Requests counted in the usage flushes dropped (vendorgate_gateway_usage_dropped_flushes_total)."}),
		routes:  routes,
		methods: countedMethods,
	}
	m.answered = make([]atomic.Pointer[statusClass], len(routes)*len(countedMethods)*statusClasses)
	m.durations = make([]prometheus.Observer, len(routes))
	for i, r := range routes {
		m.durations[i] = m.RequestDuration.WithLabelValues(r)
	}
	for _, k := range []string{"timeout", "connection", "script"} { // present at zero
		m.RedisErrors.WithLabelValues(k)
		m.RedisBreakerTrips.WithLabelValues(k)
	}
	for _, r := range []string{"busy", "error", "redis_down"} {
		m.ThrottleLocal.WithLabelValues(r)
	}
	for _, e := range []string{"granted", "refunded", "dropped"} {
		m.LeaseTokens.WithLabelValues(e)
	}
	m.decisions = make(map[string]*Decisions)
	reg.MustRegister(m.requests, m.RequestDuration, m.HTTPServerDuration, m.UpstreamDuration, m.LimiterDecisions, m.RedisCallDuration,
		m.RedisErrors, m.RedisUnsent, m.RedisBreakerTrips, m.LimiterShed, m.BucketsCharged, m.LeaseAdmissions, m.LeaseTokens, m.Refunds, m.NodeSchedLateness, m.RedisSilenceGrace, m.BreakerState, m.BreakerTransitions, m.Ready, m.AuthFailures, m.ThrottleLocal, m.ThrottleInProcess, m.ConfigInfo, m.ConfigReloads,
		m.UsageFlushes, m.UsagePending, m.UsageDropped, m.UsagePendingBytes, m.UsageDroppedReqs)
	// The runtime's and the process's own (go_*, process_*), as the
	// backend exports them: memory, GC, goroutines, CPU, file descriptors
	// of the component that autoscales.
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// KeyCacheCounts are the key cache's counters and state.
type KeyCacheCounts struct {
	// Misses are requests that waited for a key lookup, Refreshes lookups
	// made in the background (no request waited).
	Hits, Misses, Refreshes, Evictions, Invalidations uint64
	// RefreshFailures are background lookups that failed, RefreshesLate
	// scheduled refreshes whose entry expired before a lookup slot came
	// free, RefreshesScheduled those waiting now.
	RefreshFailures, RefreshesLate uint64
	RefreshesScheduled             int
	Entries                        int
	// Pushed: invalidations reach the cache (working keys kept long).
	Pushed bool
}

// KeyCacheStats reads the key cache's counters.
type KeyCacheStats func() KeyCacheCounts

// RegisterKeyCache exports the key cache's own counters: the cache counts
// with atomics and Prometheus reads them only when scraped.
func (m *Metrics) RegisterKeyCache(stats KeyCacheStats) {
	get := []func(KeyCacheCounts) uint64{
		func(c KeyCacheCounts) uint64 { return c.Hits },
		func(c KeyCacheCounts) uint64 { return c.Misses },
		func(c KeyCacheCounts) uint64 { return c.Refreshes },
		func(c KeyCacheCounts) uint64 { return c.Evictions },
		func(c KeyCacheCounts) uint64 { return c.Invalidations },
		func(c KeyCacheCounts) uint64 { return c.RefreshFailures },
		func(c KeyCacheCounts) uint64 { return c.RefreshesLate },
	}
	help := []string{"Key cache hits.",
		"Key cache misses: requests that waited for a key lookup.",
		"Key lookups made in the background to refresh a cached key before it expires (no request waits for them).",
		"Key cache evictions.",
		"Key cache invalidations.",
		"Background key lookups that failed (the entry serves until it expires; a request a second later retries).",
		"Scheduled refreshes whose entry expired before a lookup slot came free: the lookups do not keep up with the keys' TTL."}
	for i, name := range []string{"hits", "misses", "refreshes", "evictions", "invalidations", "refresh_failures", "refreshes_late"} {
		get := get[i]
		m.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "vendorgate_gateway_key_cache_" + name + "_total",
			Help: help[i],
		}, func() float64 { return float64(get(stats())) }))
	}
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "vendorgate_gateway_key_cache_entries",
		Help: "Working keys in the key cache.",
	}, func() float64 { return float64(stats().Entries) }))
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "vendorgate_gateway_key_cache_refreshes_scheduled",
		Help: "Background refreshes waiting for their time or a lookup slot.",
	}, func() float64 { return float64(stats().RefreshesScheduled) }))
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "vendorgate_gateway_key_cache_pushed",
		Help: "1 while the backend's key invalidations reach the gateway (cached keys live key_cache.pushed_ttl), 0 otherwise (key_cache.ttl).",
	}, func() float64 {
		if stats().Pushed {
			return 1
		}
		return 0
	}))
}

// OTelDurationBuckets are the bucket boundaries OpenTelemetry's semantic
// conventions advise for http.server.request.duration, in seconds.
var OTelDurationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}

// Request counts one answered request, which took d to its response
// headers, in requests_total and in http_server_request_duration_seconds.
func (m *Metrics) Request(route int, method []byte, status int, d time.Duration) {
	mi := 2
	switch string(method) {
	case "GET":
		mi = 0
	case "POST":
		mi = 1
	}
	if status < 100 || status > 599 {
		status = 599
	}
	i := (route*len(m.methods)+mi)*statusClasses + status/100 - 1
	class := m.answered[i].Load()
	if class == nil {
		class = m.firstOfClass(i)
	}
	ch := &class[status%100]
	if o := ch.duration.Load(); o != nil {
		(*o).Observe(d.Seconds())
	} else {
		m.observeHTTPFirst(ch, route, mi, status, d)
	}
	if c := ch.count.Load(); c != nil {
		(*c).Inc()
		return
	}
	c := m.requests.WithLabelValues(m.routes[route], m.methods[mi], strconv.Itoa(status))
	ch.count.Store(&c)
	c.Inc()
}

// statusClasses are the status classes a route and method count apart:
// 1xx to 5xx.
const statusClasses = 5

// statusClass holds one route's, method's and class's children by
// status % 100.
type statusClass [100]statusChildren

// statusChildren are one route's, method's and status's children of
// requests_total and http_server_request_duration_seconds, each cached at
// the status's first request.
type statusChildren struct {
	count    atomic.Pointer[prometheus.Counter]
	duration atomic.Pointer[prometheus.Observer]
}

// firstOfClass makes class i's table; of two made at once the first
// stored is kept.
func (m *Metrics) firstOfClass(i int) *statusClass {
	m.answered[i].CompareAndSwap(nil, new(statusClass))
	return m.answered[i].Load()
}

// observeHTTPFirst resolves and caches the OTel histogram's child for a
// route, method and status seen for the first time.
func (m *Metrics) observeHTTPFirst(ch *statusChildren, route, mi, status int, d time.Duration) {
	code, errType := strconv.Itoa(status), ""
	if status >= 500 {
		errType = code
	}
	method := m.methods[mi]
	if method == "other" {
		method = "_OTHER" // the convention's name for a method it does not list
	}
	o := m.HTTPServerDuration.WithLabelValues(m.routes[route], method, code, errType)
	ch.duration.Store(&o)
	o.Observe(d.Seconds())
}

// ObserveRequest records how long the request on route took; a sampled
// trace's id (traceID not empty) goes with it as an exemplar, so that a
// latency panel leads to the trace.
func (m *Metrics) ObserveRequest(route int, d time.Duration, traceID string) {
	if traceID != "" {
		if eo, ok := m.durations[route].(prometheus.ExemplarObserver); ok {
			eo.ObserveWithExemplar(d.Seconds(), prometheus.Labels{"trace_id": traceID})
			return
		}
	}
	m.durations[route].Observe(d.Seconds())
}

// Decisions are one limit's decision counters. Each outcome's child of
// LimiterDecisions is made at its first count, so that an outcome never
// seen is not exported; from then on a count is an atomic load and an add.
type Decisions struct {
	vec       *prometheus.CounterVec
	name      string
	byOutcome [outcomes]atomic.Pointer[prometheus.Counter]
}

// Count counts one decision of outcome o.
func (d *Decisions) Count(o Outcome) {
	if c := d.byOutcome[o].Load(); c != nil {
		(*c).Inc()
		return
	}
	c := d.vec.WithLabelValues(d.name, outcomeLabels[o])
	d.byOutcome[o].Store(&c)
	c.Inc()
}

// Decisions returns the decision counters of the limit named name, the
// same ones on every call: resolved once per policy when the gateway
// compiles its table, not per request.
func (m *Metrics) Decisions(name string) *Decisions {
	m.decisionsMu.Lock()
	defer m.decisionsMu.Unlock()
	d, ok := m.decisions[name]
	if !ok {
		d = &Decisions{vec: m.LimiterDecisions, name: name}
		m.decisions[name] = d
	}
	return d
}
