package redisconn

import (
	"sync/atomic"
	"time"
)

// lateness tells whether this node runs on time (OnTime), and keeps its
// on-time clock: the rule (see batcher.silent) is that Redis is called
// down for its silence only by a node that has run on time through the
// last window, and only for silence counted on that clock.
//
// A goroutine sleeps a short fixed interval (every, 5ms) and wakes. A wake
// at most slack (redis.tick_slack) later than asked counts whole; a later
// one counts every+slack and the rest is lost: time in which this node
// was not running (a CPU quota spent, neighbours on every core, a stop),
// in which it could neither send, read nor see a reply, and in which
// Redis, on the same starved cores, may have been held too. Between wakes
// the clock runs with the wall clock up to every+slack past the last
// wake, and stands still beyond (the probe is overdue: the node stalls
// now). So the on-time clock never runs faster than the wall clock, and
// on a node that runs on time it is the wall clock.
//
// It also keeps the slowest answer Redis gave over the last window
// (noteAnswer: a request's write to the first bytes read back, on the
// on-time clock): Grace, the part of a silence that Redis' own recent
// pace excuses (at most limit). A Redis that answers, however slowly, is
// not called down before it has been silent longer than it has lately
// taken; on a quiet node that is a fraction of a millisecond.
//
// Lateness (the largest wake delay of the window, callers' late timers
// included) is for the metric and the heartbeat. Reading any of them is
// an atomic load; the probe owns one goroutine, started by start and
// stopped by stop.
type lateness struct {
	every  time.Duration // the probe's sleep
	bucket time.Duration // the window is buckets of this span
	slack  time.Duration // a wake later than this is late
	limit  time.Duration // Grace never exceeds it
	clock  Clock         // the time the on-time clock is kept against, and the probe's timer
	mark   atomic.Pointer[mark]
	sched  atomic.Int64 // ns: the window's max lateness, published
	grace  atomic.Int64 // ns: the window's slowest answer (capped), published
	noted  atomic.Int64 // ns: the max noted by callers since the last wake
	answer atomic.Int64 // ns: the slowest answer since the last wake
	stopc  chan struct{}
	done   chan struct{}
}

// mark is the on-time clock at the probe's last wake.
type mark struct{ wall, on int64 }

// The probe's sleep, and the window its lateness and the slowest answer
// are the max of: long enough to span a few of a starved node's stalls,
// short enough that the grace falls back within a second or so.
const (
	latenessEvery   = 5 * time.Millisecond
	latenessWindow  = time.Second
	latenessBuckets = 4 // the window is this many buckets
)

func newLateness(every, window, slack, limit time.Duration, clk Clock) *lateness {
	l := &lateness{every: every, bucket: max(window/latenessBuckets, every), slack: slack, limit: limit, clock: clk,
		stopc: make(chan struct{}), done: make(chan struct{})}
	t := clk.Nanotime()
	l.mark.Store(&mark{wall: t, on: t})
	return l
}

// start runs the probe until stop.
func (l *lateness) start() { go l.run() }

func (l *lateness) stop() {
	close(l.stopc)
	<-l.done
}

// onTime is the on-time clock at wall (a reading of l.clock).
func (l *lateness) onTime(wall int64) int64 {
	m := l.mark.Load()
	return m.on + min(max(wall-m.wall, 0), int64(l.every+l.slack))
}

// Lateness is the node's recent scheduling lateness: the largest delay
// seen in the last window.
func (l *lateness) Lateness() time.Duration { return time.Duration(l.sched.Load()) }

// Grace is the slowest answer Redis gave in the last window (at most
// limit): a silent Redis is called down past Timeout plus this, on the
// on-time clock.
func (l *lateness) Grace() time.Duration { return time.Duration(l.grace.Load()) }

// OnTime reports whether the node has run on time through the last
// window at wall (a reading of l.clock): no tick and no caller's timer later
// than slack, and the probe not overdue now. Only such a node judges a
// silent Redis by its own clock (see batcher.silent).
func (l *lateness) OnTime(wall int64) bool {
	return l.sched.Load() <= int64(l.slack) && wall-l.mark.Load().wall <= int64(l.every+l.slack)
}

// Lost is how much of the wall clock the on-time clock has not counted
// since the probe started.
func (l *lateness) Lost() time.Duration {
	m := l.mark.Load()
	return time.Duration(m.wall - m.on)
}

// note adds a lateness a caller saw (its timer fired d late).
func (l *lateness) note(d time.Duration) { atomicMax(&l.noted, int64(d)) }

// noteAnswer adds how long Redis took to answer a request (on-time clock).
func (l *lateness) noteAnswer(d time.Duration) { atomicMax(&l.answer, int64(d)) }

func atomicMax(a *atomic.Int64, v int64) {
	for cur := a.Load(); v > cur && !a.CompareAndSwap(cur, v); cur = a.Load() {
	}
}

// window is a max over the last latenessBuckets buckets.
type window struct {
	ids   [latenessBuckets]int64 // each bucket's number (time since the epoch / bucket)
	maxes [latenessBuckets]int64
}

// add notes v in bucket id and returns the max of the window ending there.
func (w *window) add(id, v int64) int64 {
	b := id % latenessBuckets
	if w.ids[b] != id {
		w.ids[b], w.maxes[b] = id, 0
	}
	w.maxes[b] = max(w.maxes[b], v)
	m := int64(0)
	for i := range w.ids {
		if w.ids[i] > id-latenessBuckets {
			m = max(m, w.maxes[i])
		}
	}
	return m
}

func (l *lateness) run() {
	defer close(l.done)
	t := l.clock.NewTimer()
	defer t.Stop()
	epoch := l.clock.Nanotime()
	var sched, answers window
	for i := range sched.ids {
		sched.ids[i], answers.ids[i] = -1, -1
	}
	for {
		t.Reset(l.every)
		select {
		case <-l.stopc:
			return
		case <-t.Chan():
		}
		now := l.clock.Nanotime()
		m := l.mark.Load()
		l.mark.Store(&mark{wall: now, on: l.onTime(now)})
		id := (now - epoch) / int64(l.bucket)
		late := sched.add(id, max(now-m.wall-int64(l.every), l.noted.Swap(0), 0))
		slowest := answers.add(id, l.answer.Swap(0))
		l.sched.Store(late)
		l.grace.Store(min(slowest, int64(l.limit)))
	}
}
