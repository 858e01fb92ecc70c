// Package sweeper closes orders at their deadline: every interval it asks
// the order domain to fail the unfinished services of every order placed
// longer ago than the deadline.
package sweeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"vendorgate/backend/periodic"
)

type closer interface {
	CloseExpired(ctx context.Context) (int, error)
}

type observer interface {
	SweeperRun(closed int)
}

// Options configure a Sweeper.
type Options struct {
	Orders closer
	// Interval between runs: an order is closed within about an interval
	// of its deadline. Required: the backend passes config's
	// sweep_interval.
	Interval time.Duration
	// Observer may be nil.
	Observer observer
	Logger   *slog.Logger
}

// Sweeper runs in its own goroutine between Start and Close.
type Sweeper struct {
	o    Options
	loop *periodic.Loop
}

// New builds a Sweeper; Start starts it.
func New(o Options) (*Sweeper, error) {
	if o.Orders == nil {
		return nil, errors.New("sweeper: no orders")
	}
	if o.Interval <= 0 {
		return nil, fmt.Errorf("sweeper: interval %s must be positive", o.Interval)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	s := &Sweeper{o: o}
	s.loop = periodic.New(o.Interval, s.closeExpired, o.Logger, "sweeper run")
	return s, nil
}

// Start runs the sweeper every interval until Close.
func (s *Sweeper) Start() { s.loop.Start() }

// Run closes every order past its deadline once, now.
func (s *Sweeper) Run() int { return s.loop.Run() }

// closeExpired is the loop's job: it also tells the observer.
func (s *Sweeper) closeExpired(ctx context.Context) (int, error) {
	n, err := s.o.Orders.CloseExpired(ctx)
	if s.o.Observer != nil {
		s.o.Observer.SweeperRun(n)
	}
	return n, err
}

// Close stops the sweeper and waits for a run in progress.
func (s *Sweeper) Close() { s.loop.Close() }
