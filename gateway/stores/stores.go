// Package stores builds what the gateway's limits, failed keys and usage
// counts live in: with Redis URLs, one Redis client per use, each with a
// pool of its own, and on them the Redis limiter, the quotas' and sliding
// windows' limiter, the concurrency slots, the failed-key throttle and the
// usage store; without, their in-process twins, which hold for a single
// gateway only. stores.go builds them (New) and closes them (Close);
// options.go turns redis:// URLs into go-redis options (Check, which the
// gateway's configuration check runs too). Only package gateway imports
// it.
package stores

import (
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"vendorgate/config"
	"vendorgate/gateway/admin"
	"vendorgate/gateway/concurrency"
	"vendorgate/gateway/gwmetrics"
	"vendorgate/gateway/limit"
	"vendorgate/gateway/policy"
	"vendorgate/gateway/throttle"
	"vendorgate/gateway/usage"
	"vendorgate/gateway/window"
)

// The sizes and timeouts of the Redis pools no setting names, each with
// its reason (the limiter's and the throttle's are settings).
const (
	// subscriberPoolSize is the pool of the invalidation subscriber's
	// client: one long-lived SUBSCRIBE connection, and room to reconnect
	// while the old one is being closed.
	subscriberPoolSize = 4
	// usagePoolSize is the usage flusher's own pool: one flush at a time
	// (a pipelined round trip every few seconds) and a usage view read
	// beside it, never waiting for or delaying a limiter call.
	usagePoolSize = 2
	// usageTimeout bounds one flush to Redis or one read of the usage view.
	usageTimeout = 2 * time.Second
	// usageGuardTTL is how long Redis remembers a flush as applied, so
	// that its retry is not counted twice: longer than the hour of flushes
	// kept for a retry.
	usageGuardTTL = 2 * time.Hour
	// slotPoolSize is the concurrency limiter's own Redis connections: one
	// call per admitted request of a concurrency policy's routes, one per
	// release, batched, and a refresh pipeline every redis.slot_refresh.
	slotPoolSize = 16
)

// Options is what New needs.
type Options struct {
	// Config is the gateway's validated configuration: its redis and
	// failed_keys sections are read.
	Config *config.Gateway
	// Now is the clock of the limiters and the throttle (not of usage
	// buckets, which follow the wall clock).
	Now func() time.Time
	// LimiterClock is the Redis limiter's monotonic time and timers (see
	// limit.RedisOptions.Clock); the system's when nil.
	LimiterClock limit.Clock
	Logger       *slog.Logger
	Hooks        *gwmetrics.Hooks // the parts' notifications into metrics
	Metrics      *admin.Metrics
	// Names is the policy table's names by index now: the usage buckets of
	// the previous format (by row index) move under them at start.
	Names func() []string
}

// Stores are the limiters, the failed-key throttle and the usage store,
// and the Redis clients they use (none in process).
type Stores struct {
	// Limiter decides the GCRA limits: Redis, or *limit.Local.
	Limiter RateLimiter
	// Redis is the Redis limiter (its breaker, lateness, leases); nil in
	// process.
	Redis    *limit.Redis
	Windows  window.Limiter
	Slots    concurrency.Limiter
	Throttle *throttle.Throttle
	Usage    usage.Store
	Clients  Clients
}

// RateLimiter is what decides the GCRA limits (*limit.Redis,
// *limit.Local): the root hands it to its admission (admission.RateLimiter
// is the same method set).
type RateLimiter interface {
	Allow(cs policy.Checks) (limit.Decision, error)
	Refund(cs policy.Checks, d limit.Decision) int
}

// Clients are the Redis clients, one pool each; nil in process.
type Clients struct {
	// Limiter fails fast (no retries, small timeouts); the readiness
	// probe pings it.
	Limiter redis.UniversalClient
	// Throttle is the failed-key throttle's own small pool:
	// unauthenticated clients never take the limiter's connections.
	Throttle redis.UniversalClient
	// Sub is the invalidation subscriber's, with ordinary timeouts.
	Sub redis.UniversalClient
	// Usage is its own pool: flushes never wait for, or delay, a limiter
	// call.
	Usage redis.UniversalClient
	// Slots is its own pool: the concurrency policies' slots.
	Slots redis.UniversalClient
}

// New builds the limiter's client (fail fast: no retries, small
// timeouts), the failed-key throttle's (the same, a small pool of its own:
// unauthenticated clients never take a connection from the limiter), the
// subscriber's and the usage store's (ordinary timeouts), the Redis
// limiter and the shared throttle; without Redis URLs, the in-process
// limiter, throttle and usage store. When it fails, it closes what it had
// built.
// The Stores are returned by value: the gateway keeps them in place, so
// that the failed-key throttle of a request is no pointer further away.
func New(o Options) (_ Stores, err error) {
	c, now := o.Config, o.Now
	var s Stores
	if len(c.Redis.URL) == 0 {
		s.Limiter = limit.NewLocal(limit.LocalOptions{Now: now})
		s.Windows = window.NewLocal(now)
		if s.Throttle, err = throttle.NewLocal(throttle.LocalOptions{Now: now, MaxTracked: c.FailedKeys.MaxTracked}); err != nil {
			return Stores{}, err
		}
		s.Slots = concurrency.NewLocal()
		o.Logger.Info("rate limiter: in-process GCRA (no Redis configured): limits hold for this single gateway instance only")
		s.Usage = usage.NewLocal(nil)
		return s, nil
	}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	uo, err := universalOptions(c.Redis)
	if err != nil {
		return Stores{}, err
	}
	sub := *uo
	uo.MaxRetries = -1 // a retried EVALSHA can charge a bucket twice
	uo.DialerRetries = 1
	uo.ContextTimeoutEnabled = true
	uo.DialTimeout = max(c.Redis.Timeout, 100*time.Millisecond)
	// The socket deadlines are the wire's, not a caller's wait: a batch's
	// round trip is bounded by redis.wire_timeout (the throttle's calls by
	// their own context), so that a sender that got its core late still
	// reads the reply Redis sent in time.
	uo.ReadTimeout = max(c.Redis.WireTimeout, c.Redis.Timeout, 10*time.Millisecond)
	uo.WriteTimeout = uo.ReadTimeout
	uo.PoolSize = max(c.Redis.PoolSize, 1)
	// No idle connections dialed at once: the client would dial them as
	// it is made, before the limiter's transport puts its hook on it, and
	// the transport judges Redis by the sockets it watches (a connection
	// dialed first was never watched: a read on it with Redis paused
	// waited for the wire deadline, or was shed as this node's overload).
	// A connection is dialed, watched, at its first use.
	uo.MinIdleConns = 0
	uo.PoolTimeout = max(c.Redis.Timeout, 10*time.Millisecond)
	s.Clients.Limiter = redis.NewUniversalClient(uo)
	tc := *uo
	tc.PoolSize = c.FailedKeys.RedisPoolSize
	s.Clients.Throttle = redis.NewUniversalClient(&tc)
	sub.PoolSize = subscriberPoolSize
	s.Clients.Sub = redis.NewUniversalClient(&sub)
	uc := sub
	uc.PoolSize = usagePoolSize
	uc.MaxRetries = -1 // a flush is retried by the recorder, once-only by its guard
	s.Clients.Usage = redis.NewUniversalClient(&uc)
	// Below redis.timeout, the wire and busy bounds are redis.timeout
	// (docs/configuration.md).
	h, m := o.Hooks, o.Metrics
	s.Redis, err = limit.NewRedis(limit.RedisOptions{Client: s.Clients.Limiter, Timeout: c.Redis.Timeout,
		WireTimeout: max(c.Redis.WireTimeout, c.Redis.Timeout), BusyTimeout: max(c.Redis.BusyTimeout, c.Redis.Timeout),
		TickSlack:      c.Redis.TickSlack,
		BreakerOpenFor: c.Redis.BreakerOpenFor, BreakerFailures: c.Redis.BreakerFailures,
		BreakerWindow: c.Redis.BreakerWindow, BreakerFailureRatio: float64(c.Redis.BreakerFailurePercent) / 100,
		OnStateChange: h.BreakerState, OnBreakerOpen: h.LimiterBreakerOpen,
		Now: now, Clock: o.LimiterClock, Pipeline: c.Redis.Pipeline, PipelineMax: c.Redis.PipelineMax, PipelineSenders: c.Redis.PipelineSenders,
		ObserveCall: h.RedisCall,
		OnFailure:   h.RedisFailure, OnUnsent: m.RedisUnsent.Inc, OnBusy: m.LimiterShed.Inc,
		LeaseMax: c.Redis.LeaseMax, LeaseTTL: c.Redis.LeaseTTL, OnCharged: addTo(m.BucketsCharged),
		Leases: limit.LeaseHooks{Granted: addTo(m.LeaseTokens.WithLabelValues("granted")), Spent: m.LeaseAdmissions.Inc,
			Refunded: addTo(m.LeaseTokens.WithLabelValues("refunded")), Dropped: addTo(m.LeaseTokens.WithLabelValues("dropped"))}})
	if err != nil {
		return Stores{}, err
	}
	s.Limiter = s.Redis
	// Quotas and sliding windows: one call per request whose route has
	// one, through the limiter's transport (its pipelined round trips, its
	// rule and its breaker), failing at once while the breaker is open.
	if s.Windows, err = window.NewRedis(window.RedisOptions{Client: s.Clients.Limiter, Conn: s.Redis.Transport(),
		Timeout: c.Redis.Timeout, Down: s.Redis.Down, OnFailure: h.WindowFailure, OnDataLost: h.RedisDataLost,
		LeaseMax: c.Redis.LeaseMax, LeaseTTL: c.Redis.LeaseTTL}); err != nil {
		return Stores{}, err
	}
	sc := *uo
	sc.PoolSize = slotPoolSize
	s.Clients.Slots = redis.NewUniversalClient(&sc)
	// A request's slot call goes through the limiter's transport too; the
	// refreshes and releases on the slots' own client.
	s.Slots, err = concurrency.NewRedis(concurrency.Options{Client: s.Clients.Slots, Conn: s.Redis.Transport(),
		TTL: c.Redis.SlotTTL, Refresh: c.Redis.SlotRefresh, Timeout: c.Redis.Timeout, OnError: h.SlotsError, OnLost: h.SlotsLost})
	if err != nil {
		return Stores{}, err
	}
	s.Throttle, err = throttle.NewRedis(throttle.RedisOptions{Client: s.Clients.Throttle, Timeout: c.Redis.Timeout,
		Conns: c.FailedKeys.RedisPoolSize, Hold: c.Redis.BreakerOpenFor, Down: s.Redis.Down, MaxTracked: c.FailedKeys.MaxTracked,
		OnFallback: h.ThrottleFallback, OnDegraded: h.ThrottleDegraded, OnRestored: h.ThrottleRestored, Now: now})
	if err != nil {
		return Stores{}, err
	}
	o.Logger.Info("rate limiter: Redis", "addrs", strings.Join(uo.Addrs, ","), "sentinel_master", uo.MasterName, "timeout", c.Redis.Timeout.String())
	st, err := usage.NewRedis(usage.RedisOptions{Client: s.Clients.Usage, Timeout: usageTimeout, GuardTTL: usageGuardTTL})
	if err != nil {
		return Stores{}, err
	}
	// Usage an older gateway kept by row index moves under the names of
	// the table as it is (the rows were appended, never reordered): once,
	// a bucket moved is gone from the old format. A failure costs history,
	// not the start.
	if n, err := st.Migrate(o.Names()); err != nil {
		o.Logger.Warn("usage: the buckets of the previous format were not all moved; the rest expire within 25 hours", "err", err, "moved", n)
	} else if n > 0 {
		o.Logger.Info("usage: the buckets of the previous format (by row index) moved under the policies' names", "vendor_rows", n)
	}
	s.Usage = st
	return s, nil
}

// Close gives back the leased quotas' tokens, stops the Redis limiter and
// the slots' refreshes, then closes the
// clients; it skips what New did not get to. The callers of the clients
// (the usage recorder, the invalidation subscriber) are closed first.
func (s *Stores) Close() {
	if w, ok := s.Windows.(*window.Redis); ok {
		w.Close() // gives back what its leased quotas hold
	}
	if s.Redis != nil {
		s.Redis.Close()
	}
	if s.Slots != nil {
		s.Slots.Close()
	}
	s.Clients.Close()
}

// Close closes each client there is.
func (cs *Clients) Close() {
	for _, c := range []redis.UniversalClient{cs.Usage, cs.Sub, cs.Slots, cs.Limiter, cs.Throttle} {
		if c != nil {
			_ = c.Close()
		}
	}
}

// addTo is a counter's Add for an int.
func addTo(c prometheus.Counter) func(int) { return func(n int) { c.Add(float64(n)) } }
