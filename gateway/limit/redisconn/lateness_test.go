package redisconn

import (
	"testing"
	"time"
)

// TestLatenessGrace: the probe's grace is a multiple of its lateness past
// busyAt, at least the slowest answer while the node is late, capped, and
// falls back once the node is on time again.
func TestLatenessGrace(t *testing.T) {
	l := newLateness(5*time.Millisecond, 400*time.Millisecond, 5*time.Millisecond, 900*time.Millisecond)
	l.start()
	defer l.stop()
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: lateness %s, grace %s", what, l.Lateness(), l.Grace())
			}
		}
	}
	l.wakeDelay.Store(int64(40 * time.Millisecond))
	waitFor("40ms late", func() bool { return l.Lateness() >= 40*time.Millisecond })
	if g := l.Grace(); g < 8*35*time.Millisecond || g > 900*time.Millisecond {
		t.Fatalf("grace %s for a lateness of %s, want 8 × (lateness - 5ms), at most 900ms", g, l.Lateness())
	}
	l.wakeDelay.Store(int64(200 * time.Millisecond))
	waitFor("capped", func() bool { return l.Grace() == 900*time.Millisecond })
	l.wakeDelay.Store(int64(10 * time.Millisecond))
	waitFor("back to 10ms late", func() bool { return l.Lateness() < 100*time.Millisecond })
	l.noteAnswer(700 * time.Millisecond) // a slow answer on a late node counts
	waitFor("a slow answer", func() bool { return l.Grace() >= 700*time.Millisecond })
	l.wakeDelay.Store(0)
	// On time again: the slow answer and the lateness leave the window.
	waitFor("on time", func() bool { return l.Grace() < 200*time.Millisecond && l.Lateness() < 30*time.Millisecond })
}
