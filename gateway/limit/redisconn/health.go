package redisconn

import (
	"fmt"
	"time"

	"github.com/sony/gobreaker/v2"

	"vendorgate/gateway/breaker"
)

// BreakerName is the name of the limiter's breaker in metrics.
const BreakerName = "redis"

// HealthOptions configure Health. Every duration, count and ratio is
// required (config holds their defaults); the hooks are optional.
type HealthOptions struct {
	// BreakerOpenFor is how long the breaker stays open before it lets one
	// probe through.
	BreakerOpenFor time.Duration
	// BreakerFailures is how many failed round trips (a batch is one)
	// within BreakerWindow open the breaker: in a row, or when they are
	// also at least BreakerFailureRatio of the round trips that finished in
	// it.
	BreakerFailures int
	// BreakerWindow is the rolling window of the failure ratio. (Failures
	// in a row open the breaker whenever they ended.)
	BreakerWindow time.Duration
	// BreakerFailureRatio (above 0, at most 1) is the share of failed round
	// trips within the window that opens the breaker: one late round trip
	// among many answered ones opens nothing; a dead Redis fails them all.
	BreakerFailureRatio float64
	// OnStateChange is told of every breaker transition (metrics, logs). It
	// runs under the breaker's lock: it must not call back into the breaker.
	OnStateChange func(name string, from, to gobreaker.State)
	// OnBreakerOpen is told why the breaker opened, after OnStateChange:
	// the kind of the failure that opened it, a sentence for the log, and
	// whether it opened again after a failed half-open probe (an outage
	// going on) rather than from closed. It runs under the breaker's lock
	// too.
	OnBreakerOpen func(kind FailureKind, why string, reopened bool)
	// OnFailure is told of every failed round trip to Redis (a batch is
	// one), with its kind.
	OnFailure func(kind FailureKind, err error)
	// OnUnsent is told of every call given up before it was sent.
	OnUnsent func()
	// OnBusy is told of every call that failed with ErrBusy (told by the
	// caller: see Health.Busy).
	OnBusy func()
	// OnLost is told that Redis failed (a failed round trip, the breaker
	// opening): what was decided on its earlier answers goes with it.
	OnLost func()
}

// Health is the breaker over the round trips to Redis and the hooks told
// of their failures: one outcome a round trip, reported by whoever made it
// (a batch's sender, a lone call). It knows nothing of what the calls ask.
type Health struct {
	cb    *gobreaker.TwoStepCircuitBreaker[struct{}]
	hooks *hooks
}

// NewHealth returns a closed breaker; it refuses settings it cannot use.
func NewHealth(o HealthOptions) (*Health, error) {
	switch {
	case o.BreakerOpenFor <= 0:
		return nil, fmt.Errorf("redisconn: breaker open-for %s must be positive", o.BreakerOpenFor)
	case o.BreakerFailures <= 0:
		return nil, fmt.Errorf("redisconn: breaker failures %d must be positive", o.BreakerFailures)
	case o.BreakerWindow <= 0:
		return nil, fmt.Errorf("redisconn: breaker window %s must be positive", o.BreakerWindow)
	case o.BreakerFailureRatio <= 0 || o.BreakerFailureRatio > 1:
		return nil, fmt.Errorf("redisconn: breaker failure ratio %g must be above 0 and at most 1", o.BreakerFailureRatio)
	}
	h := &hooks{failure: o.OnFailure, unsent: o.OnUnsent, busy: o.OnBusy, open: o.OnBreakerOpen, lost: o.OnLost}
	cb, err := breaker.NewTwoStep[struct{}](breaker.Settings{Name: BreakerName, Failures: o.BreakerFailures,
		Window: o.BreakerWindow, FailureRatio: o.BreakerFailureRatio, OpenFor: o.BreakerOpenFor,
		OnTrip:        func(c gobreaker.Counts) { h.counts = c },
		Excluded:      notRedis, // the gateway read late, or its pool was full: not Redis' failure
		OnStateChange: h.onStateChange(o.OnStateChange, o.BreakerWindow.String())})
	if err != nil {
		return nil, fmt.Errorf("redisconn: %w", err)
	}
	return &Health{cb: cb, hooks: h}, nil
}

// State is the breaker's state; reading it also moves an open breaker
// whose time is up to half-open.
func (h *Health) State() gobreaker.State { return h.cb.State() }

// Open reports whether the breaker is open: every round trip is refused
// at once.
func (h *Health) Open() bool { return h.cb.State() == gobreaker.StateOpen }

// Failed counts a failed round trip that no sender reported (a heartbeat,
// a simulated transport's): its kind noted, the hooks told.
func (h *Health) Failed(err error) { h.hooks.onFailure(err) }

// Busy tells the hooks that a caller was shed with ErrBusy.
func (h *Health) Busy() { h.hooks.onBusy() }

// LastKind is the kind of the latest failed round trip.
func (h *Health) LastKind() FailureKind { return h.hooks.lastKind() }
