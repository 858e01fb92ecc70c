// Package breaker builds the gateway's circuit breakers (the limiter's, the
// key lookup's and one per backend), so that they open, probe and count
// alike.
package breaker

import (
	"errors"
	"fmt"
	"time"

	"github.com/sony/gobreaker/v2"
	"github.com/valyala/fasthttp"
)

// Settings configure one breaker.
type Settings struct {
	// Name labels the breaker in metrics and logs.
	Name string
	// Failures is how many consecutive failures open the breaker (with
	// Window: how many failures within the window). Required: New refuses
	// a zero.
	Failures int
	// Window, when positive, also judges failures over a rolling window:
	// the breaker opens when the last Failures calls failed in a row
	// (whenever they ended), or when, within the last Window, at least
	// Failures calls failed and they are at least FailureRatio of the calls
	// that finished there. A few failures among many successes then open
	// nothing, while a dead remote, where every call fails, opens it after
	// Failures calls as before. (The run in a row is counted apart from
	// gobreaker's window, which files a call under its start and would let
	// slow failures, a hung remote's, age out before Failures of them met.)
	Window time.Duration
	// FailureRatio is the share of failed calls within Window that opens
	// the breaker: above 0, at most 1. Required with Window (unused
	// without).
	FailureRatio float64
	// OnTrip, when set, is told the counts that opened a closed breaker
	// (the why of a trip, for logs). It runs under the breaker's lock.
	OnTrip func(gobreaker.Counts)
	// Excluded, when set, names more errors that are neither success nor
	// failure (besides a full local pool): the caller's own doing.
	Excluded func(error) bool
	// OpenFor is how long the breaker stays open before it lets one probe
	// through. Required: New refuses a zero (which gobreaker would take as
	// its own 60s).
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
func New[T any](s Settings) (*gobreaker.CircuitBreaker[T], error) {
	gs, err := settings(s)
	if err != nil {
		return nil, err
	}
	return gobreaker.NewCircuitBreaker[T](gs), nil
}

// NewTwoStep is New for a caller that reports outcomes itself: one per
// round trip from the code that made it (a batch sender), rather than one
// per waiting caller. A call it never made is reported to nobody.
func NewTwoStep[T any](s Settings) (*gobreaker.TwoStepCircuitBreaker[T], error) {
	gs, err := settings(s)
	if err != nil {
		return nil, err
	}
	return gobreaker.NewTwoStepCircuitBreaker[T](gs), nil
}

// settings turns s into gobreaker's settings. It fills in no default: a
// setting left zero or out of range is refused, named.
func settings(s Settings) (gobreaker.Settings, error) {
	switch {
	case s.Failures <= 0:
		return gobreaker.Settings{}, fmt.Errorf("breaker %s: failures %d must be positive", s.Name, s.Failures)
	case s.OpenFor <= 0:
		return gobreaker.Settings{}, fmt.Errorf("breaker %s: open for %s must be positive", s.Name, s.OpenFor)
	case s.Window < 0:
		return gobreaker.Settings{}, fmt.Errorf("breaker %s: window %s must not be negative", s.Name, s.Window)
	case s.Window > 0 && (s.FailureRatio <= 0 || s.FailureRatio > 1):
		return gobreaker.Settings{}, fmt.Errorf("breaker %s: failure ratio %g must be above 0 and at most 1", s.Name, s.FailureRatio)
	}
	failures := uint32(s.Failures)
	trip := func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= failures }
	var interval, bucket time.Duration
	var successful func(error) bool
	onState := onStateChange(s)
	if s.Window > 0 {
		ratio := s.FailureRatio
		// A rolling window of 10 buckets: counts age out a tenth at a time
		// rather than all at once at each interval's end.
		interval, bucket = s.Window, max(s.Window/10, time.Millisecond)
		// run is the failures in a row, whenever they ended. IsSuccessful
		// sees every counted outcome and OnStateChange every new
		// generation, both under the breaker's lock, which guards run.
		var run uint32
		successful = func(err error) bool {
			if err == nil {
				run = 0
				return true
			}
			run++
			return false
		}
		trip = func(c gobreaker.Counts) bool {
			finished := c.TotalFailures + c.TotalSuccesses
			return run >= failures || c.TotalFailures >= failures && float64(c.TotalFailures) >= ratio*float64(finished)
		}
		next := onState
		onState = func(name string, from, to gobreaker.State) {
			run = 0
			if next != nil {
				next(name, from, to)
			}
		}
	}
	if s.OnTrip != nil {
		inner := trip
		trip = func(c gobreaker.Counts) bool {
			if inner(c) {
				s.OnTrip(c)
				return true
			}
			return false
		}
	}
	return gobreaker.Settings{
		Name:          s.Name,
		MaxRequests:   1,
		Interval:      interval,
		BucketPeriod:  bucket,
		Timeout:       s.OpenFor,
		ReadyToTrip:   trip,
		IsSuccessful:  successful,
		OnStateChange: onState,
		IsExcluded: func(err error) bool {
			return Excluded(err) || s.Excluded != nil && s.Excluded(err)
		},
	}, nil
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
