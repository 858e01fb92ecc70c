package gateway

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"vendorgate/gateway/admin"
	"vendorgate/gateway/auth"
	"vendorgate/gateway/concurrency"
	"vendorgate/gateway/limit"
	"vendorgate/gateway/respond"
	"vendorgate/gateway/usage"
	"vendorgate/shared/apierr"
)

// errSlotsTaken answers a request past a concurrency policy's cap.
var errSlotsTaken = &apierr.Error{Code: apierr.RateLimited, Message: "too many requests of this kind in flight at once; see Retry-After"}

// slotPoolSize is the concurrency limiter's own Redis connections: one
// call per admitted request of a concurrency policy's routes, one per
// release, batched, and a refresh pipeline every redis.slot_refresh.
const slotPoolSize = 16

// admitSlots takes the request's slots of the concurrency policies its
// route counts, over every gateway, after its slot at this gateway (held
// in ex.slot, which then frees both when the answer is done). A route
// that counts none asks nothing. Past a cap: 429 rate_limited, Retry-After
// 1 s (a slot frees when an answer ends, which no clock tells); Redis
// unable to count: 503 rate_limit_unavailable, as for any limit.
func (g *Gateway) admitSlots(sn *snapshot, id *auth.Identity, ex *exchange) error {
	n := ex.plan.Slots()
	if n == 0 {
		return nil
	}
	var ss concurrency.Slots
	b := id.Buckets(sn.layout)
	for i := 0; i < n; i++ {
		key, limit, row := ex.plan.Slot(i, b)
		ss.Add(concurrency.Slot{Key: key, Cap: limit, Policy: row})
	}
	held, refused, err := g.slots.Acquire(&ss)
	if err != nil && errors.Is(err, limit.ErrBusy) {
		return err // shed: this node's overload, counted by the limiter, not a decision
	}
	if err != nil {
		for i := 0; i < ss.Count; i++ {
			sn.decisions[ss.List[i].Policy].Count(admin.Unavailable)
		}
		return fmt.Errorf("%w: %w", limit.ErrUnavailable, err)
	}
	if refused >= 0 {
		p := ss.List[refused].Policy
		sn.decisions[p].Count(admin.Limited)
		id.Usage.Limited(usage.Policy(p))
		return &respond.Refusal{Err: errSlotsTaken, RetryAfter: time.Second}
	}
	for i := 0; i < ss.Count; i++ {
		sn.decisions[ss.List[i].Policy].Count(admin.Allowed)
		id.Usage.Allowed(usage.Policy(ss.List[i].Policy))
	}
	held.Then, ex.slot = ex.slot, held
	return nil
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
