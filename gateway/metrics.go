package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"

	"vendorgate/gateway/admin"
	"vendorgate/gateway/auth"
	"vendorgate/gateway/inflight"
	"vendorgate/gateway/limit"
	"vendorgate/gateway/throttle"
)

// The adapters below turn the parts' notifications into metrics and log
// lines; the parts themselves know nothing of Prometheus.

// onBreakerState is every breaker's OnStateChange: it runs under the
// breaker's lock, so it only counts and logs. Opening and closing are
// logged; the half-open trials in between (one each breaker_open_for while
// the dependency stays down) only at debug level: the metrics count every
// transition.
func (g *Gateway) onBreakerState(name string, from, to gobreaker.State) {
	g.metrics.BreakerTransitions.WithLabelValues(name, from.String(), to.String()).Inc()
	g.metrics.BreakerState.WithLabelValues(name).Set(float64(to))
	switch {
	case from == gobreaker.StateClosed:
		g.log.Warn("breaker opened", "breaker", name)
	case to == gobreaker.StateClosed:
		g.log.Info("breaker closed", "breaker", name)
	default:
		g.log.Debug("breaker state change", "breaker", name, "from", from.String(), "to", to.String())
	}
}

// onUsageFlush is the usage recorder's OnFlush.
func (g *Gateway) onUsageFlush(err error, pending, dropped int) {
	g.metrics.UsagePending.Set(float64(pending))
	g.metrics.UsageDropped.Add(float64(dropped))
	if err != nil {
		g.metrics.UsageFlushes.WithLabelValues("error").Inc()
		g.log.Warn("usage flush failed; kept for the next flush", "pending", pending, "err", err)
		return
	}
	g.metrics.UsageFlushes.WithLabelValues("ok").Inc()
}

// observeRedisCall is the Redis limiter's ObserveCall: how long each
// request waited for its decision (its errors are counted per round trip,
// by onRedisFailure).
func (g *Gateway) observeRedisCall(d time.Duration, _ error) {
	g.metrics.RedisCallDuration.Observe(d.Seconds())
}

// onRedisFailure is the Redis limiter's OnFailure: one per failed round
// trip, by kind.
func (g *Gateway) onRedisFailure(kind limit.FailureKind, _ error) {
	g.metrics.RedisErrors.WithLabelValues(string(kind)).Inc()
}

// onLimiterBreakerOpen is the Redis limiter's OnBreakerOpen: every
// opening is counted by the kind of the failure that opened it; the log
// says why it opened from closed, once per outage, and a failed half-open
// probe only at debug level (an outage going on is not news).
func (g *Gateway) onLimiterBreakerOpen(kind limit.FailureKind, why string, reopened bool) {
	g.metrics.RedisBreakerTrips.WithLabelValues(string(kind)).Inc()
	level := slog.LevelWarn
	if reopened {
		level = slog.LevelDebug
	}
	g.log.Log(context.Background(), level, "limiter breaker opened: redis failing", "cause", string(kind), "why", why)
}

// onThrottleFallback is the Redis throttle's OnFallback: each failed key
// counted in process is counted, never logged (a flood of them is the
// case).
func (g *Gateway) onThrottleFallback(why throttle.Fallback) {
	g.metrics.ThrottleLocal.WithLabelValues(string(why)).Inc()
}

// onThrottleDegraded is the Redis throttle's OnDegraded: one line when it
// begins counting in process.
func (g *Gateway) onThrottleDegraded(why throttle.Fallback, err error) {
	g.metrics.ThrottleInProcess.Set(1)
	attrs := []any{"reason", string(why)}
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	g.log.Warn("failed-key throttle counting in process", attrs...)
}

// onThrottleRestored is the Redis throttle's OnRestored: one line when it
// counts in Redis again, with what the fallback counted.
func (g *Gateway) onThrottleRestored(degradedFor time.Duration, counted uint64) {
	g.metrics.ThrottleInProcess.Set(0)
	g.log.Info("failed-key throttle counting in redis again",
		"in_process_for", degradedFor.Round(time.Millisecond).String(), "counted_in_process", counted)
}

// registerKeyCache exports the key cache's counters.
func (g *Gateway) registerKeyCache(cache *auth.Cache) {
	g.metrics.RegisterKeyCache(func() admin.KeyCacheCounts {
		s := cache.Stats()
		scheduled := 0
		if g.auth != nil {
			scheduled = g.auth.RefreshesScheduled()
		}
		return admin.KeyCacheCounts{Hits: s.Hits, Misses: s.Misses, Refreshes: s.Refreshes, Evictions: s.Evictions,
			Invalidations: s.Invalidations, RefreshFailures: s.RefreshFailures, RefreshesLate: s.RefreshesLate,
			RefreshesScheduled: scheduled, Entries: s.Entries, Pushed: cache.Pushed()}
	})
}

// upstreamObserver is the proxy's ObserveUpstream: each backend's call
// durations, labelled by its host.
func (g *Gateway) upstreamObserver(backends []string) (func(int, time.Duration), error) {
	observers := make([]prometheus.Observer, len(backends))
	for i, b := range backends {
		u, err := url.Parse(b)
		if err != nil {
			return nil, fmt.Errorf("backend url %q: %w", b, err)
		}
		observers[i] = g.metrics.UpstreamDuration.WithLabelValues(u.Host)
	}
	return func(i int, d time.Duration) { observers[i].Observe(d.Seconds()) }, nil
}

// registerInFlight registers the in-flight metrics: refusals by cap, the
// requests and downloads in flight now, and the streams cut for their
// rate (the counter it returns, for the proxy).
func (g *Gateway) registerInFlight() prometheus.Counter {
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vendorgate_gateway_in_flight_refused_total",
		Help: "Requests refused with 429 because their vendor had as many in flight at this gateway as its cap allows, by cap: requests (in_flight.requests) or downloads (in_flight.downloads)."},
		[]string{"cap"})
	for _, r := range []inflight.Refusal{inflight.OverRequests, inflight.OverDownloads} {
		g.inFlightRefused[r] = refused.WithLabelValues(r.String())
	}
	tooSlow := prometheus.NewCounter(prometheus.CounterOpts{Name: "vendorgate_gateway_streams_too_slow_total",
		Help: "Report downloads cut because they moved less than proxy.stream_min_rate over a window after the grace."})
	g.metrics.Registry.MustRegister(refused, tooSlow,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "vendorgate_gateway_in_flight_requests",
			Help: "Vendor requests in flight at this gateway, report downloads among them."},
			func() float64 { r, _ := g.inflight.Total(); return float64(r) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "vendorgate_gateway_in_flight_downloads",
			Help: "Report downloads in flight at this gateway (each holds a connection of the backend's stream pool)."},
			func() float64 { _, d := g.inflight.Total(); return float64(d) }))
	return tooSlow
}
