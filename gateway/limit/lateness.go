package limit

import (
	"sync/atomic"
	"time"
)

// lateness measures how late this node runs the gateway: a goroutine
// sleeps a short fixed interval (every) and notes how much later than
// asked it woke, and callers whose own timers fired late add what they
// saw (note). Grace is the largest lateness of the last window: on a quiet
// node about zero, on a node whose cores are taken by others the delays a
// process waiting on the kernel's scheduler sees, which is what Redis, on
// the same node, sees too. A caller gives a silent Redis that much more
// time before it calls it dead (see batcher.silent).
//
// Reading Grace is one atomic load; the probe owns one goroutine, started
// by newLateness and stopped by stop.
type lateness struct {
	every  time.Duration // the probe's sleep
	bucket time.Duration // the window is buckets of this span
	limit  time.Duration // Grace never exceeds it
	grace  atomic.Int64  // ns: the max of the window, published
	noted  atomic.Int64  // ns: the max noted by callers since the last wake
	// wakeDelay (ns; tests only) is slept after each wake: a probe (a
	// node) that gets its core that late.
	wakeDelay atomic.Int64
	stopc     chan struct{}
	done      chan struct{}
}

// The probe's sleep, and the window its grace is the max of: long enough
// to span a few of a starved node's stalls, short enough that the grace
// falls back within a second or so once the node is quiet again.
const (
	latenessEvery   = 5 * time.Millisecond
	latenessWindow  = time.Second
	latenessBuckets = 4 // the window is this many buckets
)

func newLateness(every, window, limit time.Duration) *lateness {
	return &lateness{every: every, bucket: max(window/latenessBuckets, every), limit: limit,
		stopc: make(chan struct{}), done: make(chan struct{})}
}

// start runs the probe until stop.
func (l *lateness) start() { go l.run() }

func (l *lateness) stop() {
	close(l.stopc)
	<-l.done
}

// Grace is the node's recent scheduling lateness: the largest delay seen
// in the last window, at most limit.
func (l *lateness) Grace() time.Duration { return time.Duration(l.grace.Load()) }

// note adds a lateness a caller saw (its timer fired d late).
func (l *lateness) note(d time.Duration) {
	for cur := l.noted.Load(); int64(d) > cur && !l.noted.CompareAndSwap(cur, int64(d)); cur = l.noted.Load() {
	}
}

func (l *lateness) run() {
	defer close(l.done)
	t := time.NewTimer(l.every)
	defer t.Stop()
	epoch := time.Now()
	var ids [latenessBuckets]int64 // each bucket's number (ns since epoch / bucket)
	var maxes [latenessBuckets]int64
	for i := range ids {
		ids[i] = -1
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
		late := max(int64(now.Sub(asked)-l.every), l.noted.Swap(0), 0)
		id := int64(now.Sub(epoch) / l.bucket)
		b := id % latenessBuckets
		if ids[b] != id {
			ids[b], maxes[b] = id, 0
		}
		maxes[b] = max(maxes[b], late)
		g := int64(0)
		for i := range ids {
			if ids[i] > id-latenessBuckets {
				g = max(g, maxes[i])
			}
		}
		l.grace.Store(min(g, int64(l.limit)))
	}
}
