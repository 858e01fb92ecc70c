package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"vendorgate/backend/periodic"
)

type stepper interface {
	StepSandbox(ctx context.Context) (int, error)
}

// RunnerOptions configure a Runner.
type RunnerOptions struct {
	Orders stepper
	// Tick is how often due steps are looked for: a step lands within a
	// tick of its due time. Required: the backend derives it from
	// config's sandbox_delay.
	Tick   time.Duration
	Logger *slog.Logger
}

// Runner is the simulated provider at work: it steps due sandbox orders in
// its own goroutine between Start and Close.
type Runner struct {
	o    RunnerOptions
	loop *periodic.Loop
}

// NewRunner builds a Runner; Start starts it.
func NewRunner(o RunnerOptions) (*Runner, error) {
	if o.Orders == nil {
		return nil, errors.New("sandbox: no orders")
	}
	if o.Tick <= 0 {
		return nil, fmt.Errorf("sandbox: tick %s must be positive", o.Tick)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Runner{o: o, loop: periodic.New(o.Tick, o.Orders.StepSandbox, o.Logger, "sandbox step")}, nil
}

// Start steps due orders every tick until Close.
func (r *Runner) Start() { r.loop.Start() }

// Run steps every due order once, now, and returns how many it worked: the
// tick's work, callable on its own (a test moves its clock, then runs one
// step and looks, instead of sleeping through ticks). A failure is logged;
// the next tick tries again.
func (r *Runner) Run() int { return r.loop.Run() }

// Close stops the runner and waits for a step in progress.
func (r *Runner) Close() { r.loop.Close() }
