package redisconn

import (
	"sync/atomic"
	"time"
)

// lateness measures how late this node runs: a goroutine sleeps a short
// fixed interval (every) and notes how much later than asked it woke, and
// callers whose own timers fired late add what they saw (note). Its
// Lateness is the largest of the last window: on a quiet node about zero.
//
// The grace a silent Redis is given (Grace, see batcher.silent) is nothing
// while the lateness is below busyAt (timer slack, a collection: noise),
// and past it a multiple (latenessFactor) of the lateness beyond busyAt,
// and at least the longest Redis took to answer over the same window
// (noteAnswer: a request's write to the first bytes read back, at the
// socket). The probe only sleeps and wakes, and the kernel wakes a sleeper
// first; a Redis on the same starved cores (a sidecar, a test machine)
// does work between its waits and competes for every slice, and is held
// several times longer: measured under three busy loops on two cores,
// Redis silent 74ms while the probe saw 15ms, 240ms while it saw 66ms. On
// a quiet node the grace is zero: a dead Redis is called dead at about
// the timeout, and a Redis that answers slowly there is not excused.
//
// Reading Grace is one atomic load; the probe owns one goroutine, started
// by start and stopped by stop.
type lateness struct {
	every  time.Duration // the probe's sleep
	bucket time.Duration // the window is buckets of this span
	busyAt time.Duration // from this lateness on, answers' times count too
	limit  time.Duration // Grace never exceeds it
	sched  atomic.Int64  // ns: the window's max lateness, published
	grace  atomic.Int64  // ns: the grace, published
	noted  atomic.Int64  // ns: the max noted by callers since the last wake
	answer atomic.Int64  // ns: the longest answer since the last wake
	// wakeDelay (ns; tests only) is slept after each wake: a probe (a
	// node) that gets its core that late.
	wakeDelay atomic.Int64
	stopc     chan struct{}
	done      chan struct{}
}

// The probe's sleep, and the window its lateness is the max of: long
// enough to span a few of a starved node's stalls, short enough that the
// grace falls back within a second or so once the node is quiet again.
const (
	latenessEvery   = 5 * time.Millisecond
	latenessWindow  = time.Second
	latenessBuckets = 4 // the window is this many buckets
	latenessFactor  = 8 // the grace is this many times the lateness past busyAt
)

func newLateness(every, window, busyAt, limit time.Duration) *lateness {
	return &lateness{every: every, bucket: max(window/latenessBuckets, every), busyAt: busyAt, limit: limit,
		stopc: make(chan struct{}), done: make(chan struct{})}
}

// start runs the probe until stop.
func (l *lateness) start() { go l.run() }

func (l *lateness) stop() {
	close(l.stopc)
	<-l.done
}

// Lateness is the node's recent scheduling lateness: the largest delay
// seen in the last window.
func (l *lateness) Lateness() time.Duration { return time.Duration(l.sched.Load()) }

// Grace is how much longer than its timeout a silent Redis is waited for
// now: at most limit.
func (l *lateness) Grace() time.Duration { return time.Duration(l.grace.Load()) }

// note adds a lateness a caller saw (its timer fired d late).
func (l *lateness) note(d time.Duration) { atomicMax(&l.noted, int64(d)) }

// noteAnswer adds how long Redis took to answer a request.
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
	t := time.NewTimer(l.every)
	defer t.Stop()
	epoch := time.Now()
	var sched, answers window
	for i := range sched.ids {
		sched.ids[i], answers.ids[i] = -1, -1
	}
	for {
		asked := time.Now()
		t.Reset(l.every)
		select {
		case <-l.stopc:
			return
		case <-t.C:
		}
		if d := l.wakeDelay.Load(); d > 0 {
			time.Sleep(time.Duration(d))
		}
		now := time.Now()
		id := int64(now.Sub(epoch) / l.bucket)
		late := sched.add(id, max(int64(now.Sub(asked)-l.every), l.noted.Swap(0), 0))
		slowest := answers.add(id, l.answer.Swap(0))
		g := int64(0)
		if late >= int64(l.busyAt) {
			g = max(latenessFactor*(late-int64(l.busyAt)), slowest)
		}
		l.sched.Store(late)
		l.grace.Store(min(g, int64(l.limit)))
	}
}
