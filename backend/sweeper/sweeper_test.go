package sweeper

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"vendorgate/config"
)

// orders counts calls and closes n orders on each.
type orders struct {
	mu    sync.Mutex
	calls int
	n     int
	err   error
}

func (o *orders) CloseExpired(context.Context) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls++
	return o.n, o.err
}

func (o *orders) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.calls
}

type runs struct {
	mu     sync.Mutex
	runs   int
	closed int
}

func (r *runs) SweeperRun(n int) {
	r.mu.Lock()
	r.runs++
	r.closed += n
	r.mu.Unlock()
}

func TestRunsEveryIntervalUntilClosed(t *testing.T) {
	o, m := &orders{n: 2}, &runs{}
	s, err := New(Options{Orders: o, Interval: 5 * time.Millisecond, Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	deadline := time.Now().Add(2 * time.Second)
	for o.count() < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	s.Close()
	after := o.count()
	if after < 3 {
		t.Fatalf("%d runs", after)
	}
	time.Sleep(30 * time.Millisecond)
	if o.count() != after {
		t.Fatal("the sweeper ran after Close")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.runs != after || m.closed != 2*after {
		t.Fatalf("observer saw %d runs, %d closed; want %d, %d", m.runs, m.closed, after, 2*after)
	}
	s.Close() // twice is fine
}

func TestRunSurvivesErrors(t *testing.T) {
	o := &orders{err: errors.New("database is locked")}
	s, err := New(Options{Orders: o, Interval: config.DefaultBackend().SweepInterval})
	if err != nil {
		t.Fatal(err)
	}
	if n := s.Run(); n != 0 || o.count() != 1 {
		t.Fatalf("Run = %d after %d calls", n, o.count())
	}
	if _, err := New(Options{}); err == nil {
		t.Fatal("New without orders succeeded")
	}
}

// TestNewRefusesZeros: the sweeper fills in no default of its own: its
// interval, left zero (or negative), is refused with an error that names
// it; the backend passes config's sweep_interval.
func TestNewRefusesZeros(t *testing.T) {
	if _, err := New(Options{Orders: &orders{}, Interval: time.Second}); err != nil {
		t.Fatalf("valid options refused: %v", err)
	}
	for _, d := range []time.Duration{0, -time.Second} {
		_, err := New(Options{Orders: &orders{}, Interval: d})
		switch {
		case err == nil:
			t.Errorf("interval %s: accepted", d)
		case !strings.Contains(err.Error(), "interval"):
			t.Errorf("interval %s: %q does not name it", d, err)
		}
	}
}
