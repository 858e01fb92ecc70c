// Package periodic runs a job every interval in a goroutine of its own,
// between Start and Close: the loop the sandbox runner and the sweeper
// share.
package periodic

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// runTimeout bounds one run of a job.
const runTimeout = 30 * time.Second

// Loop runs its job every interval between Start and Close.
type Loop struct {
	every  time.Duration
	job    func(context.Context) (int, error)
	logger *slog.Logger
	what   string
	stop   chan struct{}
	done   sync.WaitGroup
	once   sync.Once
}

// New builds a Loop running job every interval (which must be positive);
// a failed run is logged at error level as what. Start starts it.
func New(every time.Duration, job func(context.Context) (int, error), logger *slog.Logger, what string) *Loop {
	return &Loop{every: every, job: job, logger: logger, what: what, stop: make(chan struct{})}
}

// Start runs the job every interval until Close.
func (l *Loop) Start() {
	l.done.Add(1)
	go func() {
		defer l.done.Done()
		t := time.NewTicker(l.every)
		defer t.Stop()
		for {
			select {
			case <-l.stop:
				return
			case <-t.C:
				l.Run()
			}
		}
	}()
}

// Run runs the job once, now, bounded by 30 seconds, and returns what it
// counted. A failure is logged; the next tick tries again.
func (l *Loop) Run() int {
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	n, err := l.job(ctx)
	if err != nil {
		l.logger.Error(l.what, "error", err)
	}
	return n
}

// Close stops the loop and waits for a run in progress.
func (l *Loop) Close() {
	l.once.Do(func() { close(l.stop) })
	l.done.Wait()
}
