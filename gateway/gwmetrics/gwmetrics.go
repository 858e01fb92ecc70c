// Package gwmetrics turns the gateway's parts' notifications (breakers,
// the usage recorder's flushes, the Redis limiter's calls and failures,
// the failed-key throttle's fallback, the key cache, the backends' call
// durations, the in-flight counts, the concurrency slots' failed calls,
// Redis' data lost) into metrics and log lines: the parts
// themselves know nothing of Prometheus. Hooks holds the collectors
// (admin.Metrics) and the logger; each of its methods is one part's
// callback, given to that part by the gateway's New.
package gwmetrics

import (
	"context"
	"errors"
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
	"vendorgate/gateway/usage"
	"vendorgate/gateway/window"
)

// Hooks turns the parts' notifications into metrics and log lines.
type Hooks struct {
	m   *admin.Metrics
	log *slog.Logger
	// The concurrency slots' failed calls and restored slots (set by
	// RegisterSlots), and Redis' data losses seen (set by New).
	slotErrors    *prometheus.CounterVec
	slotsRestored prometheus.Counter
	dataLost      prometheus.Counter
}

// New is the hooks counting in m and logging to log; neither may be nil.
func New(m *admin.Metrics, log *slog.Logger) (*Hooks, error) {
	if m == nil || log == nil {
		return nil, errors.New("gwmetrics: metrics and a logger are required")
	}
	h := &Hooks{m: m, log: log}
	h.dataLost = prometheus.NewCounter(prometheus.CounterOpts{Name: "vendorgate_gateway_redis_data_lost_total",
		Help: "Times this gateway found Redis' data marker gone or replaced: Redis lost its data, and quota counters restarted from zero mid-window."})
	if err := m.Registry.Register(h.dataLost); err != nil {
		return nil, fmt.Errorf("gwmetrics: %w", err)
	}
	return h, nil
}

// BreakerState is every breaker's OnStateChange: it runs under the
// breaker's lock, so it only counts and logs. Opening and closing are
// logged; the half-open trials in between (one each breaker_open_for while
// the dependency stays down) only at debug level: the metrics count every
// transition.
func (h *Hooks) BreakerState(name string, from, to gobreaker.State) {
	h.m.BreakerTransitions.WithLabelValues(name, from.String(), to.String()).Inc()
	h.m.BreakerState.WithLabelValues(name).Set(float64(to))
	switch {
	case from == gobreaker.StateClosed:
		h.log.Warn("breaker opened", "breaker", name)
	case to == gobreaker.StateClosed:
		h.log.Info("breaker closed", "breaker", name)
	default:
		h.log.Debug("breaker state change", "breaker", name, "from", from.String(), "to", to.String())
	}
}

// UsageFlush is the usage recorder's OnFlush.
func (h *Hooks) UsageFlush(rep usage.FlushReport) {
	h.m.UsagePending.Set(float64(rep.Pending))
	h.m.UsagePendingBytes.Set(float64(rep.PendingBytes))
	h.m.UsageDropped.Add(float64(rep.Dropped))
	h.m.UsageDroppedReqs.Add(float64(rep.DroppedCounts))
	if rep.Dropped > 0 {
		h.log.Warn("usage flushes dropped: their counts are lost", "flushes", rep.Dropped, "requests", rep.DroppedCounts)
	}
	if rep.Err != nil {
		h.m.UsageFlushes.WithLabelValues("error").Inc()
		h.log.Warn("usage flush failed; kept for the next flush", "pending", rep.Pending, "pending_bytes", rep.PendingBytes, "err", rep.Err)
		return
	}
	h.m.UsageFlushes.WithLabelValues("ok").Inc()
}

// RedisCall is the Redis limiter's ObserveCall: how long each
// request waited for its decision (its errors are counted per round trip,
// by onRedisFailure).
func (h *Hooks) RedisCall(d time.Duration, _ error) {
	h.m.RedisCallDuration.Observe(d.Seconds())
}

// RedisFailure is the Redis limiter's OnFailure: one per failed round
// trip, by kind.
func (h *Hooks) RedisFailure(kind limit.FailureKind, _ error) {
	h.m.RedisErrors.WithLabelValues(string(kind)).Inc()
}

// LimiterBreakerOpen is the Redis limiter's OnBreakerOpen: every
// opening is counted by the kind of the failure that opened it; the log
// says why it opened from closed, once per outage, and a failed half-open
// probe only at debug level (an outage going on is not news).
func (h *Hooks) LimiterBreakerOpen(kind limit.FailureKind, why string, reopened bool) {
	h.m.RedisBreakerTrips.WithLabelValues(string(kind)).Inc()
	level := slog.LevelWarn
	if reopened {
		level = slog.LevelDebug
	}
	h.log.Log(context.Background(), level, "limiter breaker opened: redis failing", "cause", string(kind), "why", why)
}

// ThrottleFallback is the Redis throttle's OnFallback: each failed key
// counted in process is counted, never logged (a flood of them is the
// case).
func (h *Hooks) ThrottleFallback(why throttle.Fallback) {
	h.m.ThrottleLocal.WithLabelValues(string(why)).Inc()
}

// ThrottleDegraded is the Redis throttle's OnDegraded: one line when it
// begins counting in process.
func (h *Hooks) ThrottleDegraded(why throttle.Fallback, err error) {
	h.m.ThrottleInProcess.Set(1)
	attrs := []any{"reason", string(why)}
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	h.log.Warn("failed-key throttle counting in process", attrs...)
}

// ThrottleRestored is the Redis throttle's OnRestored: one line when it
// counts in Redis again, with what the fallback counted.
func (h *Hooks) ThrottleRestored(degradedFor time.Duration, counted uint64) {
	h.m.ThrottleInProcess.Set(0)
	h.log.Info("failed-key throttle counting in redis again",
		"in_process_for", degradedFor.Round(time.Millisecond).String(), "counted_in_process", counted)
}

// RegisterKeyCache exports the key cache's counters, with the refreshes
// scheduled now as scheduled says.
func (h *Hooks) RegisterKeyCache(cache *auth.Cache, scheduled func() int) {
	h.m.RegisterKeyCache(func() admin.KeyCacheCounts {
		s := cache.Stats()
		return admin.KeyCacheCounts{Hits: s.Hits, Misses: s.Misses, Refreshes: s.Refreshes, Evictions: s.Evictions,
			Invalidations: s.Invalidations, RefreshFailures: s.RefreshFailures, RefreshesLate: s.RefreshesLate,
			RefreshesScheduled: scheduled(), Entries: s.Entries, Pushed: cache.Pushed()}
	})
}

// UpstreamObserver is the proxy's ObserveUpstream: each backend's call
// durations, labelled by its host.
func (h *Hooks) UpstreamObserver(backends []string) (func(int, time.Duration), error) {
	observers := make([]prometheus.Observer, len(backends))
	for i, b := range backends {
		u, err := url.Parse(b)
		if err != nil {
			return nil, fmt.Errorf("backend url %q: %w", b, err)
		}
		observers[i] = h.m.UpstreamDuration.WithLabelValues(u.Host)
	}
	return func(i int, d time.Duration) { observers[i].Observe(d.Seconds()) }, nil
}

// RegisterInFlight registers the in-flight metrics: refusals by cap, the
// requests and downloads in flight now, and the streams cut for their
// rate (the counter it returns, for the proxy), with the counts of in.
// refusedBy is the refusals' counter by the cap that refused.
func (h *Hooks) RegisterInFlight(in *inflight.Counter) (refusedBy [inflight.OverDownloads + 1]prometheus.Counter, tooSlow prometheus.Counter) {
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vendorgate_gateway_in_flight_refused_total",
		Help: "Requests refused with 429 because their vendor had as many in flight at this gateway as its cap allows, by cap: requests (in_flight.requests) or downloads (in_flight.downloads)."},
		[]string{"cap"})
	for _, r := range []inflight.Refusal{inflight.OverRequests, inflight.OverDownloads} {
		refusedBy[r] = refused.WithLabelValues(r.String())
	}
	tooSlow = prometheus.NewCounter(prometheus.CounterOpts{Name: "vendorgate_gateway_streams_too_slow_total",
		Help: "Report downloads cut because they moved less than proxy.stream_min_rate over a window after the grace."})
	h.m.Registry.MustRegister(refused, tooSlow,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "vendorgate_gateway_in_flight_requests",
			Help: "Vendor requests in flight at this gateway, report downloads among them."},
			func() float64 { r, _ := in.Total(); return float64(r) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "vendorgate_gateway_in_flight_downloads",
			Help: "Report downloads in flight at this gateway (each holds a connection of the backend's stream pool)."},
			func() float64 { _, d := in.Total(); return float64(d) }))
	return refusedBy, tooSlow
}

// WindowFailure is the window limiter's OnFailure: a call that failed (a
// charge or a refund), counted among the limiter's Redis errors by the
// same kinds; each request it refused is counted unavailable with the
// request's decisions.
func (h *Hooks) WindowFailure(err error) {
	h.RedisFailure(limit.KindOf(err), err)
}

// RedisDataLost is the window limiter's OnDataLost: the marker of Redis'
// data is gone or replaced, so Redis lost its data (a flush, a restart
// without its persistence, a failover to a replica without it), quota
// counters included: every quota restarted from zero mid-window and hands
// out up to its whole limit again. Counted and logged at ERROR; the
// requests go on (docs/limits.md, "When Redis loses its data").
func (h *Hooks) RedisDataLost() {
	h.dataLost.Inc()
	h.log.Error("redis lost its data: its data marker is gone; every quota counter restarted from zero mid-window, so each quota may admit up to its whole limit again this window",
		"marker", window.MarkerKey)
}

// RegisterSlots registers the concurrency policies' metrics: the requests
// holding slots at this gateway (held, 0 before there is a limiter), and
// the refreshes and releases that failed.
func (h *Hooks) RegisterSlots(held func() int) {
	h.slotErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vendorgate_gateway_concurrency_slot_errors_total",
		Help: "Pipelined refreshes or releases of concurrency-policy slots that failed, by call (refresh, release): the slots concerned are freed at their expiry (redis.slot_ttl)."},
		[]string{"call"})
	h.slotsRestored = prometheus.NewCounter(prometheus.CounterOpts{Name: "vendorgate_gateway_concurrency_slots_restored_total",
		Help: "Live concurrency-policy slots a refresh found gone from Redis (lost data, or expired while Redis was stopped or unreachable) and put back."})
	h.m.Registry.MustRegister(h.slotErrors, h.slotsRestored,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "vendorgate_gateway_concurrency_slots_held",
			Help: "Requests holding slots of concurrency policies at this gateway now (each refreshed every redis.slot_refresh)."},
			func() float64 { return float64(held()) }))
}

// SlotsError is the concurrency limiter's OnError: a refresh or a release
// that failed. A slot not refreshed is freed at its expiry (the cap is
// then lower by it until redis.slot_ttl passes; a slot not given back
// holds its place until then).
func (h *Hooks) SlotsError(what string, err error) {
	if c := h.slotErrors; c != nil {
		c.WithLabelValues(what).Inc()
	}
	h.log.Warn("concurrency slots: "+what+" failed; the slots concerned expire after redis.slot_ttl", "err", err)
}

// SlotsLost is the concurrency limiter's OnLost: a refresh found live
// slots gone from Redis (it lost its data, or their expiry passed while it
// was stopped or unreachable) and put them back. Until then the cap let as
// many more requests in.
func (h *Hooks) SlotsLost(n int) {
	if h.slotsRestored != nil {
		h.slotsRestored.Add(float64(n))
	}
	h.log.Warn("concurrency slots: live slots were gone from Redis and are put back; until now the cap admitted as many more", "slots", n)
}
