// Package sweeper closes orders at their deadline: every interval it asks
// the order domain to fail the unfinished services of every order placed
// longer ago than the deadline.
package sweeper

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
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
	// Interval between runs. Default 1s: an order is closed within about a
	// second of its deadline.
	Interval time.Duration
	// Observer may be nil.
	Observer observer
	Logger   *slog.Logger
}

// Sweeper runs in its own goroutine between Start and Close.
type Sweeper struct {
	o    Options
	stop chan struct{}
	done sync.WaitGroup
	once sync.Once
}

// New builds a Sweeper; Start starts it.
func New(o Options) (*Sweeper, error) {
	if o.Orders == nil {
		return nil, errors.New("sweeper: no orders")
	}
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Sweeper{o: o, stop: make(chan struct{})}, nil
}

// Start runs the sweeper every interval until Close.
func (s *Sweeper) Start() {
	s.done.Add(1)
	go func() {
		defer s.done.Done()
		t := time.NewTicker(s.o.Interval)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				s.Run()
			}
		}
	}()
}

// Run closes every order past its deadline once, now.
func (s *Sweeper) Run() int {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := s.o.Orders.CloseExpired(ctx)
	if err != nil {
		s.o.Logger.Error("sweeper run", "error", err)
	}
	if s.o.Observer != nil {
		s.o.Observer.SweeperRun(n)
	}
	return n
}

// Close stops the sweeper and waits for a run in progress.
func (s *Sweeper) Close() {
	s.once.Do(func() { close(s.stop) })
	s.done.Wait()
}
