package gateway

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"vendorgate/gateway/admin"
	"vendorgate/gateway/auth"
	"vendorgate/gateway/limit"
	"vendorgate/gateway/policy"
	"vendorgate/gateway/respond"
	"vendorgate/gateway/window"
)

// windowed is a request's quota and sliding window checks (package
// window), for the routes whose plan has any: its checks, their decision,
// and whether it was made.
type windowed struct {
	checks   policy.Checks
	decision window.Decision
	decided  bool
}

// admitWindowed admits a request whose route has quotas or sliding
// windows: those first (one Redis call, all-or-nothing within itself), then
// the GCRA limits and the in-flight cap (admitLimits). Whatever refuses
// after the windows charged gives their charge back, so that a request is
// charged by every limit or by none.
func (g *Gateway) admitWindowed(sn *snapshot, id *auth.Identity, rt *route, ex *exchange) error {
	// Its own allocation (about 1.3 KB), so that the exchange of a route
	// without windows stays as small as before.
	w := new(windowed)
	ex.windows = w
	ex.plan.Windows(&w.checks, id.Buckets(sn.layout))
	var err error
	w.decision, err = g.windows.Charge(w.checks)
	busy := errors.Is(err, limit.ErrBusy) // this node's overload, not Redis'
	if !busy {
		g.recordWindows(sn, id, w, err) // a call shed is counted by the limiter, not a decision
	}
	if err != nil {
		if w.checks.Enforces() {
			if busy {
				return err // 503 request_failed, as a GCRA call shed
			}
			return limit.ErrUnavailable // 503 rate_limit_unavailable: never fail open
		}
		// Only shadow windows: counted unavailable, the request goes on.
	} else {
		w.decided = true
		if !w.decision.Allowed {
			return &respond.Refusal{Err: errRateLimited, RetryAfter: w.decision.RetryAfter}
		}
	}
	err = g.admitLimits(sn, id, rt, ex)
	if err != nil && w.decided {
		w.decision = g.windows.Refund(w.checks, w.decision)
	}
	return err
}

// recordWindows keeps the books of the windowed checks, as recordLimits
// does of the GCRA ones: decision metrics, usage counts by policy index
// and a log line for each refusal a shadow window would have made.
func (g *Gateway) recordWindows(sn *snapshot, id *auth.Identity, w *windowed, err error) {
	cs := &w.checks
	for i := 0; i < cs.Count; i++ {
		c := &cs.List[i]
		if err != nil {
			sn.decisions[c.Policy].Count(admin.Unavailable)
			continue
		}
		// Always decided, and never a twin (a window has none).
		g.recordCheck(sn, id, c, true, w.decision.Results[i].Allowed)
	}
}

// appendWindowHeaders appends the enforced windowed checks to the
// RateLimit-Policy value pol ("name";q=limit;w=the window's seconds) and
// the decided ones to the RateLimit value state (r what remains, t the
// seconds until the window is whole again).
func appendWindowHeaders(pol, state []byte, w *windowed) ([]byte, []byte) {
	for i := 0; i < w.checks.Count; i++ {
		rt := &w.checks.List[i].Rate
		if rt.Shadow {
			continue
		}
		res := &w.decision.Results[i]
		span := rt.Period
		if w.decided {
			span = res.Window
		} else if rt.Kind == policy.Quota {
			s, e := rt.Calendar.Window(time.Now())
			span = e.Sub(s)
		}
		pol = policy.AppendPolicy(pol, rt.Name, rt.Limit, span)
		if !w.decided {
			continue
		}
		rem, reset := w.decision.Left(i)
		state = policy.AppendState(state, rt.Name, rem, reset)
	}
	return pol, state
}

// onWindowFailure counts a window limiter call that failed (a charge or a
// refund) among the limiter's Redis errors, by the same kinds; each
// request it refused is counted unavailable by recordWindows.
func (g *Gateway) onWindowFailure(err error) {
	g.onRedisFailure(limit.KindOf(err), err)
}

// onRedisDataLost is the window limiter's OnDataLost: the marker of
// Redis' data is gone or replaced, so Redis lost its data (a flush, a
// restart without its persistence, a failover to a replica without it),
// quota counters included: every quota restarted from zero mid-window
// and hands out up to its whole limit again. Counted and logged at ERROR;
// the requests go on (docs/limits.md, "When Redis loses its data").
func (g *Gateway) onRedisDataLost() {
	if g.redisDataLost != nil {
		g.redisDataLost.Inc()
	}
	g.log.Error("redis lost its data: its data marker is gone; every quota counter restarted from zero mid-window, so each quota may admit up to its whole limit again this window",
		"marker", window.MarkerKey)
}

// registerDataLost registers the count of Redis data losses seen.
func (g *Gateway) registerDataLost() {
	g.redisDataLost = prometheus.NewCounter(prometheus.CounterOpts{Name: "vendorgate_gateway_redis_data_lost_total",
		Help: "Times this gateway found Redis' data marker gone or replaced: Redis lost its data, and quota counters restarted from zero mid-window."})
	g.metrics.Registry.MustRegister(g.redisDataLost)
}
