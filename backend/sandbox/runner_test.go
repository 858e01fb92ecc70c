package sandbox

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// orders counts StepSandbox calls and works n orders on each.
type orders struct {
	mu    sync.Mutex
	calls int
	n     int
	err   error
}

func (o *orders) StepSandbox(ctx context.Context) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls++
	if _, ok := ctx.Deadline(); !ok {
		return 0, errors.New("a step without a deadline")
	}
	return o.n, o.err
}

// testTick is the tests' tick (the backend derives its own from
// sandbox_delay).
const testTick = 100 * time.Millisecond

// TestRunStepsOnceNow: Run is one tick's work, done at once on the caller's
// goroutine, without Start (the step tests use to look after moving the
// clock). It fails if Run does not call StepSandbox exactly once, returns
// another count, or calls it without a deadline.
func TestRunStepsOnceNow(t *testing.T) {
	o := &orders{n: 3}
	r, err := NewRunner(RunnerOptions{Orders: o, Tick: testTick})
	if err != nil {
		t.Fatal(err)
	}
	if n := r.Run(); n != 3 || o.calls != 1 {
		t.Fatalf("Run = %d after %d calls; want 3 after 1", n, o.calls)
	}
	r.Close() // never started: Close returns
}

// TestRunLogsAFailedStep: a failed step is logged and Run returns what was
// worked before it; the next tick tries again.
func TestRunLogsAFailedStep(t *testing.T) {
	var logs bytes.Buffer
	o := &orders{n: 1, err: errors.New("database is locked")}
	r, err := NewRunner(RunnerOptions{Orders: o, Tick: testTick, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if n := r.Run(); n != 1 || o.calls != 1 {
		t.Fatalf("Run = %d after %d calls; want 1 after 1", n, o.calls)
	}
	if !strings.Contains(logs.String(), "sandbox step") || !strings.Contains(logs.String(), "database is locked") {
		t.Fatalf("the failure was not logged: %q", logs.String())
	}
	if _, err := NewRunner(RunnerOptions{Tick: testTick}); err == nil {
		t.Fatal("NewRunner without orders succeeded")
	}
}

// TestNewRunnerRefusesZeros: the runner fills in no default of its own:
// its tick, left zero (or negative), is refused with an error that names
// it; the backend passes one derived from sandbox_delay.
func TestNewRunnerRefusesZeros(t *testing.T) {
	if _, err := NewRunner(RunnerOptions{Orders: &orders{}, Tick: testTick}); err != nil {
		t.Fatalf("valid options refused: %v", err)
	}
	for _, d := range []time.Duration{0, -time.Millisecond} {
		_, err := NewRunner(RunnerOptions{Orders: &orders{}, Tick: d})
		switch {
		case err == nil:
			t.Errorf("tick %s: accepted", d)
		case !strings.Contains(err.Error(), "tick"):
			t.Errorf("tick %s: %q does not name it", d, err)
		}
	}
}
