package gateway

import (
	"github.com/prometheus/client_golang/prometheus"

	"vendorgate/gateway/admin"
	"vendorgate/gateway/admission"
	"vendorgate/gateway/auth"
	"vendorgate/gateway/policy"
	"vendorgate/gateway/usage"
)

// slotPoolSize is the concurrency limiter's own Redis connections: one
// call per admitted request of a concurrency policy's routes, one per
// release, batched, and a refresh pipeline every redis.slot_refresh.
const slotPoolSize = 16

// recordSlots keeps the books of a request's concurrency policies, when
// their limiter answered: each policy's decision metric and the vendor's
// usage counts (the refusing policy limited, none charged; all allowed
// when admitted), or each counted unavailable when Redis could not count.
// A call shed (this node's overload) is counted by the limiter, not here.
func (g *Gateway) recordSlots(sn *snapshot, id *auth.Identity, a *admission.Admission, b *policy.Buckets) {
	if !a.SlotsAsked {
		return
	}
	if a.Refused.Kind == admission.Slots {
		sn.decisions[a.Refused.Policy].Count(admin.Limited)
		id.Usage.Limited(usage.Policy(a.Refused.Policy))
		return
	}
	for i := 0; i < a.Plan.Slots(); i++ {
		_, _, row := a.Plan.Slot(i, b)
		if a.SlotsErr != nil {
			sn.decisions[row].Count(admin.Unavailable)
			continue
		}
		sn.decisions[row].Count(admin.Allowed)
		id.Usage.Allowed(usage.Policy(row))
	}
}

// onSlotsError is the concurrency limiter's OnError: a refresh or a
// release that failed. A slot not refreshed is freed at its expiry (the
// cap is then lower by it until redis.slot_ttl passes; a slot not given
// back holds its place until then).
func (g *Gateway) onSlotsError(what string, err error) {
	if c := g.slotErrors; c != nil {
		c.WithLabelValues(what).Inc()
	}
	g.log.Warn("concurrency slots: "+what+" failed; the slots concerned expire after redis.slot_ttl", "err", err)
}

// onSlotsLost is the concurrency limiter's OnLost: a refresh found live
// slots gone from Redis (it lost its data, or their expiry passed while it
// was stopped or unreachable) and put them back. Until then the cap let
// as many more requests in.
func (g *Gateway) onSlotsLost(n int) {
	if g.slotsRestored != nil {
		g.slotsRestored.Add(float64(n))
	}
	g.log.Warn("concurrency slots: live slots were gone from Redis and are put back; until now the cap admitted as many more", "slots", n)
}

// registerSlots registers the concurrency policies' metrics: the requests
// holding slots at this gateway, and the refreshes and releases that
// failed.
func (g *Gateway) registerSlots() {
	g.slotErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vendorgate_gateway_concurrency_slot_errors_total",
		Help: "Pipelined refreshes or releases of concurrency-policy slots that failed, by call (refresh, release): the slots concerned are freed at their expiry (redis.slot_ttl)."},
		[]string{"call"})
	g.slotsRestored = prometheus.NewCounter(prometheus.CounterOpts{Name: "vendorgate_gateway_concurrency_slots_restored_total",
		Help: "Live concurrency-policy slots a refresh found gone from Redis (lost data, or expired while Redis was stopped or unreachable) and put back."})
	g.metrics.Registry.MustRegister(g.slotErrors, g.slotsRestored,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "vendorgate_gateway_concurrency_slots_held",
			Help: "Requests holding slots of concurrency policies at this gateway now (each refreshed every redis.slot_refresh)."},
			func() float64 {
				if g.slots == nil {
					return 0
				}
				return float64(g.slots.Held())
			}))
}
