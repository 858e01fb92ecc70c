package breaker

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
	"github.com/valyala/fasthttp"
)

var errDown = errors.New("backend down")

// transitions records what OnStateChange and CloseIdle were told, in order.
type transitions struct {
	mu  sync.Mutex
	log []string
}

func (tr *transitions) onChange(name string, from, to gobreaker.State) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.log = append(tr.log, fmt.Sprintf("%s:%s->%s", name, from, to))
}

func (tr *transitions) closeIdle() {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.log = append(tr.log, "close-idle")
}

func (tr *transitions) String() string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return fmt.Sprint(tr.log)
}

func fail(cb *gobreaker.CircuitBreaker[int], err error) error {
	_, e := cb.Execute(func() (int, error) { return 0, err })
	return e
}

// The breaker opens after Failures consecutive failures, not before; while
// open it refuses at once without calling; after OpenFor one probe goes
// through and a success closes it. Every move first closes the idle
// connections (away from closed), then tells OnStateChange.
func TestOpensProbesAndCloses(t *testing.T) {
	var tr transitions
	cb := mustNew[int](t, Settings{Name: "backend", Failures: 3, OpenFor: 50 * time.Millisecond,
		OnStateChange: tr.onChange, CloseIdle: tr.closeIdle})
	for i := 0; i < 2; i++ {
		if err := fail(cb, errDown); !errors.Is(err, errDown) {
			t.Fatalf("failure %d: %v", i, err)
		}
	}
	if cb.State() != gobreaker.StateClosed {
		t.Fatalf("open after 2 of 3 failures")
	}
	_ = fail(cb, errDown)
	if cb.State() != gobreaker.StateOpen {
		t.Fatalf("state %s after 3 failures, want open", cb.State())
	}
	called := false
	if _, err := cb.Execute(func() (int, error) { called = true; return 0, nil }); !errors.Is(err, gobreaker.ErrOpenState) || called {
		t.Fatalf("open breaker: err %v, called %v", err, called)
	}
	// Open to half-open happens on the next call once OpenFor passed; poll
	// with calls, not a sleep-then-assert.
	deadline := time.Now().Add(5 * time.Second)
	for {
		v, err := cb.Execute(func() (int, error) { return 7, nil })
		if err == nil {
			if v != 7 {
				t.Fatalf("probe answered %d", v)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no probe let through within 5s: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if cb.State() != gobreaker.StateClosed {
		t.Fatalf("state %s after a good probe, want closed", cb.State())
	}
	want := "[close-idle backend:closed->open close-idle backend:open->half-open backend:half-open->closed]"
	if got := tr.String(); got != want {
		t.Fatalf("transitions %s, want %s", got, want)
	}
}

// A success between failures resets the count: only consecutive failures
// open it.
func TestOnlyConsecutiveFailuresOpen(t *testing.T) {
	cb := mustNew[int](t, Settings{Name: "x", Failures: 2, OpenFor: time.Hour})
	for i := 0; i < 5; i++ {
		_ = fail(cb, errDown)
		_ = fail(cb, nil)
	}
	if cb.State() != gobreaker.StateClosed {
		t.Fatalf("alternating failures opened the breaker")
	}
}

// A full local pool is the gateway's own overload: it fails the call but
// never counts against the remote side.
func TestFullPoolNeverOpens(t *testing.T) {
	cb := mustNew[int](t, Settings{Name: "x", Failures: 1, OpenFor: time.Hour})
	for i := 0; i < 10; i++ {
		if err := fail(cb, fasthttp.ErrNoFreeConns); !errors.Is(err, fasthttp.ErrNoFreeConns) {
			t.Fatalf("err %v", err)
		}
	}
	if c := cb.Counts(); cb.State() != gobreaker.StateClosed || c.TotalFailures != 0 {
		t.Fatalf("state %s, counts %+v after a full pool", cb.State(), c)
	}
	_ = fail(cb, errDown)
	if cb.State() != gobreaker.StateOpen {
		t.Fatalf("a real failure did not open a breaker of 1")
	}
}

// A failed probe reopens it for another OpenFor, closing idle connections
// again; without CloseIdle, OnStateChange alone is told.
func TestFailedProbeReopens(t *testing.T) {
	var tr transitions
	cb := mustNew[int](t, Settings{Name: "r", Failures: 1, OpenFor: 20 * time.Millisecond, OnStateChange: tr.onChange})
	_ = fail(cb, errDown)
	deadline := time.Now().Add(5 * time.Second)
	for cb.State() != gobreaker.StateHalfOpen {
		if time.Now().After(deadline) {
			t.Fatal("never half-open")
		}
		time.Sleep(5 * time.Millisecond)
	}
	_ = fail(cb, errDown)
	if cb.State() != gobreaker.StateOpen {
		t.Fatalf("state %s after a failed probe", cb.State())
	}
	if got, want := tr.String(), "[r:closed->open r:open->half-open r:half-open->open]"; got != want {
		t.Fatalf("transitions %s, want %s", got, want)
	}
}

// A call that failed before the remote side was asked anything leaves the
// breaker closed however often it happens; a failure of the remote side
// opens it.
func TestExcludedErrorsNeverOpen(t *testing.T) {
	for _, c := range []struct {
		err   error
		opens bool
	}{
		{fasthttp.ErrNoFreeConns, false},
		{fasthttp.ErrHostClientRedirectToDifferentScheme, false},
		{fasthttp.ErrConnectionClosed, true},
		{fasthttp.ErrTimeout, true},
		{errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), true},
	} {
		cb := mustNew[struct{}](t, Settings{Name: "t", Failures: 1, OpenFor: time.Hour})
		for range 5 {
			_, _ = cb.Execute(func() (struct{}, error) { return struct{}{}, fmt.Errorf("backend b: %w", c.err) })
		}
		if open := cb.State() == gobreaker.StateOpen; open != c.opens {
			t.Errorf("%v: open %v, want %v", c.err, open, c.opens)
		}
	}
}
