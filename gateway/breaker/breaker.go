// Package breaker builds the gateway's circuit breakers (the limiter's, the
// key lookup's and one per backend), so that they open, probe and count
// alike.
package breaker

import (
	"errors"
	"time"

	"github.com/sony/gobreaker/v2"
	"github.com/valyala/fasthttp"
)

// Settings configure one breaker.
type Settings struct {
	// Name labels the breaker in metrics and logs.
	Name string
	// Failures is how many consecutive failures open the breaker. It must
	// be positive (config validates it): at zero every failure opens it.
	Failures int
	// OpenFor is how long the breaker stays open before it lets one probe
	// through; zero is gobreaker's default of 60s.
	OpenFor time.Duration
	// OnStateChange is told of every transition (metrics, logs); nil for
	// none. It runs under the breaker's lock: it must not call back into
	// the breaker.
	OnStateChange func(name string, from, to gobreaker.State)
	// CloseIdle, when set, closes the idle pooled connections to what the
	// breaker guards; it runs first on every move to open or half-open, so
	// that the single half-open probe dials a fresh connection. A pooled
	// connection to a process that died (kill -9, crash) still looks idle:
	// the probe would take it, fail on it (no retry: the breaker decides)
	// and reopen the breaker for another open period, once per dead
	// connection left in the pool, although the restarted process was ready
	// long before. Retrying on a fresh connection instead would fix GETs
	// only: a POST that failed that way may have reached the backend. It
	// runs under the breaker's lock, which closing idle connections never
	// takes.
	CloseIdle func()
}

// New returns a breaker that opens after s.Failures consecutive failures
// and, once s.OpenFor has passed, lets one call through to probe. Errors
// that say nothing of the remote side are not counted (Excluded).
func New[T any](s Settings) *gobreaker.CircuitBreaker[T] {
	failures := uint32(max(s.Failures, 0))
	return gobreaker.NewCircuitBreaker[T](gobreaker.Settings{
		Name:          s.Name,
		MaxRequests:   1,
		Timeout:       s.OpenFor,
		ReadyToTrip:   func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= failures },
		OnStateChange: onStateChange(s),
		IsExcluded:    Excluded,
	})
}

// Excluded reports whether err is a call that failed before the remote side
// was asked anything, so that it counts neither against a breaker nor for
// it: the call still fails (503), but it opens the breaker for no one. A
// full local connection pool (fasthttp.ErrNoFreeConns) is this gateway's
// overload; a request the client library refused to send (an absolute-form
// target of another scheme, fasthttp.ErrHostClientRedirectToDifferentScheme)
// is the client's doing. Either, counted, would let one client open a
// breaker for everyone.
func Excluded(err error) bool {
	return errors.Is(err, fasthttp.ErrNoFreeConns) || errors.Is(err, fasthttp.ErrHostClientRedirectToDifferentScheme)
}

// onStateChange is s.OnStateChange after s.CloseIdle on a move away from
// closed.
func onStateChange(s Settings) func(name string, from, to gobreaker.State) {
	if s.CloseIdle == nil {
		return s.OnStateChange
	}
	return func(name string, from, to gobreaker.State) {
		if to != gobreaker.StateClosed {
			s.CloseIdle()
		}
		if s.OnStateChange != nil {
			s.OnStateChange(name, from, to)
		}
	}
}
