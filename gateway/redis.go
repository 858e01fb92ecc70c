package gateway

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"vendorgate/config"
	"vendorgate/gateway/concurrency"
	"vendorgate/gateway/limit"
	"vendorgate/gateway/throttle"
	"vendorgate/gateway/usage"
	"vendorgate/gateway/window"
)

// connectRedis builds the limiter's client (fail fast: no retries, small
// timeouts), the failed-key throttle's (the same, a small pool of its own:
// unauthenticated clients never take a connection from the limiter), the
// subscriber's and the usage store's (ordinary timeouts), the Redis
// limiter and the shared throttle; without Redis URLs, the in-process
// limiter, throttle and usage store.
func (g *Gateway) connectRedis(c *config.Gateway, now func() time.Time) (usage.Store, error) {
	if len(c.Redis.URL) == 0 {
		g.limiter = limit.NewLocal(limit.LocalOptions{Now: now})
		g.windows = window.NewLocal(now)
		var err error
		if g.throttle, err = throttle.NewLocal(throttle.LocalOptions{Now: now, MaxTracked: c.FailedKeys.MaxTracked}); err != nil {
			return nil, err
		}
		g.slots = concurrency.NewLocal()
		g.log.Info("rate limiter: in-process GCRA (no Redis configured): limits hold for this single gateway instance only")
		return usage.NewLocal(nil), nil
	}
	uo, err := universalOptions(c.Redis)
	if err != nil {
		return nil, err
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
	uo.MinIdleConns = min(uo.PoolSize, 8)
	uo.PoolTimeout = max(c.Redis.Timeout, 10*time.Millisecond)
	g.limiterClient = redis.NewUniversalClient(uo)
	tc := *uo
	tc.PoolSize = c.FailedKeys.RedisPoolSize
	tc.MinIdleConns = 0
	g.throttleClient = redis.NewUniversalClient(&tc)
	sub.PoolSize = subscriberPoolSize
	g.subClient = redis.NewUniversalClient(&sub)
	uc := sub
	uc.PoolSize = usagePoolSize
	uc.MaxRetries = -1 // a flush is retried by the recorder, once-only by its guard
	g.usageClient = redis.NewUniversalClient(&uc)
	// Below redis.timeout, the wire and busy bounds are redis.timeout
	// (docs/configuration.md).
	g.redisLim, err = limit.NewRedis(limit.RedisOptions{Client: g.limiterClient, Timeout: c.Redis.Timeout,
		WireTimeout: max(c.Redis.WireTimeout, c.Redis.Timeout), BusyTimeout: max(c.Redis.BusyTimeout, c.Redis.Timeout),
		TickSlack:      c.Redis.TickSlack,
		BreakerOpenFor: c.Redis.BreakerOpenFor, BreakerFailures: c.Redis.BreakerFailures,
		BreakerWindow: c.Redis.BreakerWindow, BreakerFailureRatio: float64(c.Redis.BreakerFailurePercent) / 100,
		OnStateChange: g.hooks.BreakerState, OnBreakerOpen: g.hooks.LimiterBreakerOpen,
		Now: now, Pipeline: c.Redis.Pipeline, PipelineMax: c.Redis.PipelineMax, PipelineSenders: c.Redis.PipelineSenders,
		ObserveCall: g.hooks.RedisCall,
		OnFailure:   g.hooks.RedisFailure, OnUnsent: g.metrics.RedisUnsent.Inc, OnBusy: g.metrics.LimiterShed.Inc,
		LeaseMax: c.Redis.LeaseMax, LeaseTTL: c.Redis.LeaseTTL, OnCharged: addTo(g.metrics.BucketsCharged),
		Leases: limit.LeaseHooks{Granted: addTo(g.metrics.LeaseTokens.WithLabelValues("granted")), Spent: g.metrics.LeaseAdmissions.Inc,
			Refunded: addTo(g.metrics.LeaseTokens.WithLabelValues("refunded")), Dropped: addTo(g.metrics.LeaseTokens.WithLabelValues("dropped"))}})
	if err != nil {
		return nil, err
	}
	g.limiter = g.redisLim
	// Quotas and sliding windows: one call per request whose route has
	// one, through the limiter's transport (its pipelined round trips, its
	// rule and its breaker), failing at once while the breaker is open.
	if g.windows, err = window.NewRedis(window.RedisOptions{Client: g.limiterClient, Conn: g.redisLim.Transport(),
		Timeout: c.Redis.Timeout, Down: g.redisLim.Down, OnFailure: g.hooks.WindowFailure, OnDataLost: g.hooks.RedisDataLost}); err != nil {
		return nil, err
	}
	sc := *uo
	sc.PoolSize, sc.MinIdleConns = slotPoolSize, 0
	g.slotsClient = redis.NewUniversalClient(&sc)
	// A request's slot call goes through the limiter's transport too; the
	// refreshes and releases on the slots' own client.
	g.slots, err = concurrency.NewRedis(concurrency.Options{Client: g.slotsClient, Conn: g.redisLim.Transport(),
		TTL: c.Redis.SlotTTL, Refresh: c.Redis.SlotRefresh, Timeout: c.Redis.Timeout, OnError: g.hooks.SlotsError, OnLost: g.hooks.SlotsLost})
	if err != nil {
		return nil, err
	}
	g.throttle, err = throttle.NewRedis(throttle.RedisOptions{Client: g.throttleClient, Timeout: c.Redis.Timeout,
		Conns: c.FailedKeys.RedisPoolSize, Hold: c.Redis.BreakerOpenFor, Down: g.redisLim.Down, MaxTracked: c.FailedKeys.MaxTracked,
		OnFallback: g.hooks.ThrottleFallback, OnDegraded: g.hooks.ThrottleDegraded, OnRestored: g.hooks.ThrottleRestored, Now: now})
	if err != nil {
		return nil, err
	}
	g.log.Info("rate limiter: Redis", "addrs", strings.Join(uo.Addrs, ","), "sentinel_master", uo.MasterName, "timeout", c.Redis.Timeout.String())
	st, err := usage.NewRedis(usage.RedisOptions{Client: g.usageClient, Timeout: usageTimeout, GuardTTL: usageGuardTTL})
	if err != nil {
		return nil, err
	}
	// Usage an older gateway kept by row index moves under the names of
	// the table as it is (the rows were appended, never reordered): once,
	// a bucket moved is gone from the old format. A failure costs history,
	// not the start.
	if n, err := st.Migrate(g.usageNames()); err != nil {
		g.log.Warn("usage: the buckets of the previous format were not all moved; the rest expire within 25 hours", "err", err, "moved", n)
	} else if n > 0 {
		g.log.Info("usage: the buckets of the previous format (by row index) moved under the policies' names", "vendor_rows", n)
	}
	return st, nil
}

// addTo is a counter's Add for an int.
func addTo(c prometheus.Counter) func(int) { return func(n int) { c.Add(float64(n)) } }

// universalOptions turns redis:// URLs into go-redis options: one URL a
// server, several a Cluster, MasterName a Sentinel set.
func universalOptions(o config.Redis) (*redis.UniversalOptions, error) {
	uo := &redis.UniversalOptions{MasterName: o.MasterName}
	for i, s := range o.URL {
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
