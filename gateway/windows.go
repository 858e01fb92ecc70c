package gateway

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"vendorgate/gateway/admin"
	"vendorgate/gateway/admission"
	"vendorgate/gateway/auth"
	"vendorgate/gateway/limit"
	"vendorgate/gateway/policy"
	"vendorgate/gateway/window"
)

// recordWindows keeps the books of the windowed checks, as recordLimits
// does of the GCRA ones: decision metrics, usage counts by policy index
// and a log line for each refusal a shadow window would have made.
func (g *Gateway) recordWindows(sn *snapshot, id *auth.Identity, w *admission.Windowed) {
	cs := &w.Checks
	for i := 0; i < cs.Count; i++ {
		c := &cs.List[i]
		if w.Err != nil {
			sn.decisions[c.Policy].Count(admin.Unavailable)
			continue
		}
		// Always decided, and never a twin (a window has none).
		g.recordCheck(sn, id, c, true, w.Decision.Results[i].Allowed)
	}
}

// appendWindowHeaders appends the enforced windowed checks to the
// RateLimit-Policy value pol ("name";q=limit;w=the window's seconds) and
// the decided ones to the RateLimit value state (r what remains, t the
// seconds until the window is whole again).
func appendWindowHeaders(pol, state []byte, w *admission.Windowed) ([]byte, []byte) {
	for i := 0; i < w.Checks.Count; i++ {
		rt := &w.Checks.List[i].Rate
		if rt.Shadow {
			continue
		}
		res := &w.Decision.Results[i]
		span := rt.Period
		if w.Decided {
			span = res.Window
		} else if rt.Kind == policy.Quota {
			s, e := rt.Calendar.Window(time.Now())
			span = e.Sub(s)
		}
		pol = policy.AppendPolicy(pol, rt.Name, rt.Limit, span)
		if !w.Decided {
			continue
		}
		rem, reset := w.Decision.Left(i)
		state = policy.AppendState(state, rt.Name, rem, reset)
	}
	return pol, state
}

// onWindowFailure counts a window limiter call that failed (a charge or a
// refund) among the limiter's Redis errors, by the same kinds; each
// request it refused is counted unavailable by recordWindows.
func (g *Gateway) onWindowFailure(err error) {
	g.hooks.RedisFailure(limit.KindOf(err), err)
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
