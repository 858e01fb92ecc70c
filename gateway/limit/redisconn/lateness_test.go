package redisconn

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestOnTimeClock: on a probe that wakes on time the on-time clock is the
// wall clock; on one that wakes 60ms late each tick counts every+slack and
// the rest is lost; it never runs faster than the wall clock, stands still
// while the probe is overdue, and counts in full again once the probe is
// on time. It runs in a synctest bubble: the probe's timers and the spans
// measured are the bubble's clock, the probe late by exactly what the
// test says and by nothing of the machine's.
func TestOnTimeClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A 20ms slack: a 60ms late probe is past it.
		const every, slack = 5 * time.Millisecond, 20 * time.Millisecond
		clk := &lateClock{SystemClock: SystemClock{Epoch: time.Unix(0, 0)}}
		l := newLateness(every, 400*time.Millisecond, slack, 900*time.Millisecond, clk)
		l.start()
		defer l.stop()
		measure := func(d time.Duration) (wall, on time.Duration) {
			w0 := time.Now().UnixNano()
			o0 := l.onTime(w0)
			advance(d) // the span of the bubble's clock measured
			w1 := time.Now().UnixNano()
			o1 := l.onTime(w1)
			if o1-o0 > w1-w0 {
				t.Fatalf("on-time clock ran %s in %s of wall clock", time.Duration(o1-o0), time.Duration(w1-w0))
			}
			return time.Duration(w1 - w0), time.Duration(o1 - o0)
		}
		// On time.
		if wall, on := measure(300 * time.Millisecond); on < wall/2 {
			t.Fatalf("quiet probe: on-time %s of %s wall", on, wall)
		}
		lost0 := l.Lost()
		clk.late.Store(int64(60 * time.Millisecond))
		advance(150 * time.Millisecond) // a few late ticks before the measure
		// 60ms late: each 65ms tick counts at most 25ms.
		wall, on := measure(650 * time.Millisecond)
		if on > wall*(every+slack)/(every+60*time.Millisecond)+every+slack {
			t.Fatalf("60ms-late probe: on-time %s of %s wall, want at most %s of each 65ms tick", on, wall, every+slack)
		}
		if l.Lost()-lost0 < wall/3 {
			t.Fatalf("60ms-late probe: lost %s of %s", l.Lost()-lost0, wall)
		}
		if l.Lateness() < 55*time.Millisecond || l.OnTime(time.Now().UnixNano()) {
			t.Fatalf("lateness %s with the probe 60ms late, or on time", l.Lateness())
		}
		// Grace is the slowest answer of the window, capped, whatever the
		// lateness.
		if g := l.Grace(); g != 0 {
			t.Fatalf("grace %s with no answer noted", g)
		}
		clk.late.Store(0)
		l.noteAnswer(700 * time.Millisecond)
		waitFor := func(what string, ok func() bool) {
			t.Helper()
			if !within(5*time.Second, ok) { // the bubble's 5 s
				t.Fatalf("%s: lateness %s, grace %s", what, l.Lateness(), l.Grace())
			}
		}
		waitFor("a slow answer", func() bool { return l.Grace() == 700*time.Millisecond })
		l.noteAnswer(2 * time.Second)
		waitFor("capped", func() bool { return l.Grace() == 900*time.Millisecond })
		waitFor("the slow answers leave the window", func() bool { return l.Grace() == 0 })
		if wall, on := measure(300 * time.Millisecond); on < wall/2 {
			t.Fatalf("on time again: on-time %s of %s wall", on, wall)
		}
	})
}
