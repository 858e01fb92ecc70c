package redisconn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
)

// ErrBusy means this gateway could not get a request's call answered
// within Options.BusyTimeout although Redis was answering meanwhile,
// or could not get a connection of its own pool in time: the node is past
// its capacity, Redis is not at fault. The caller refuses
// the request as an overload (503 request_failed), never as a limiter
// outage, and never lets it through.
var ErrBusy = errors.New("gateway too busy to decide the rate limit in time (redis answering)")

// FailureKind says how a round trip to Redis failed.
type FailureKind string

// The kinds of failed round trips.
const (
	// FailTimeout: no answer within the wire deadline (a hung or
	// unreachable Redis, a network black hole).
	FailTimeout FailureKind = "timeout"
	// FailConnection: the connection could not be made or broke (refused,
	// reset, closed). (No free connection in the pool is not Redis'
	// failure: the caller is shed with ErrBusy, the breaker not told.)
	FailConnection FailureKind = "connection"
	// FailScript: Redis answered with an error (a script error, OOM,
	// LOADING, a Cluster redirection it could not follow).
	FailScript FailureKind = "script"
)

// KindOf classifies the error of a failed round trip.
func KindOf(err error) FailureKind {
	var ne net.Error
	switch {
	case isReply(err):
		return FailScript
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return FailTimeout
	default:
		return FailConnection
	}
}

// isReply reports whether err is an answer from Redis (an error reply),
// as opposed to a failure to get one.
func isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

// hooks are the outward notifications, each optional, and what is
// remembered of failures to say why the breaker opened.
type hooks struct {
	failure func(kind FailureKind, err error)
	unsent  func()
	busy    func()
	open    func(kind FailureKind, why string, reopened bool)
	// lost is told that Redis failed (a failed round trip, the breaker
	// opening).
	lost func()
	// last is the kind of the latest failed round trip; counts are the
	// breaker's counts when it last tripped (written and read under the
	// breaker's lock: OnTrip and OnStateChange both run under it).
	last   atomic.Value
	counts gobreaker.Counts
}

func (h *hooks) onFailure(err error) {
	k := KindOf(err)
	h.last.Store(k)
	if h.lost != nil {
		h.lost()
	}
	if h.failure != nil {
		h.failure(k, err)
	}
}

func (h *hooks) onUnsent() {
	if h.unsent != nil {
		h.unsent()
	}
}

func (h *hooks) onBusy() {
	if h.busy != nil {
		h.busy()
	}
}

func (h *hooks) lastKind() FailureKind {
	k, _ := h.last.Load().(FailureKind)
	return k
}

// onStateChange passes a transition on, and on a move to open says why.
func (h *hooks) onStateChange(next func(name string, from, to gobreaker.State), window string) func(name string, from, to gobreaker.State) {
	return func(name string, from, to gobreaker.State) {
		if next != nil {
			next(name, from, to)
		}
		if to == gobreaker.StateOpen && h.lost != nil {
			h.lost()
		}
		if to != gobreaker.StateOpen || h.open == nil {
			return
		}
		k := h.lastKind()
		if from == gobreaker.StateHalfOpen {
			h.open(k, fmt.Sprintf("the half-open probe failed (%s)", k), true)
			return
		}
		c := h.counts
		h.open(k, fmt.Sprintf("%d of %d round trips to redis failed within %s (last: %s)",
			c.TotalFailures, c.TotalFailures+c.TotalSuccesses, window, k), false)
	}
}
