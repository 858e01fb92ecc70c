package auth

import (
	"container/heap"
	"sync"
	"time"
)

// refresher runs the background refreshes of working keys at the time the
// cache set for each (Cache.Schedule): at once for an entry with more than
// TTL to live, a fifth of TTL before expiry for one with less. Without
// pushes, a key requested at least once per half of TTL is then looked up
// about once per TTL (a refresh made at the request that finds it due
// would be one per request for a key requested every half TTL), and a
// refresh late behind others still has a fifth of TTL before the entry
// expires. At most max lookups run at once; the scheduled refreshes wait
// in due order.
type refresher struct {
	a   *Authenticator
	max int

	mu      sync.Mutex
	queue   refreshQueue
	timer   *time.Timer // armed for the queue's head; nil before the first
	running int         // workers (each makes one lookup at a time)
	closed  bool
}

// refreshItem is one scheduled refresh of the entry of tag that expires
// at expires (a later entry of the key makes it stale), looked up by sum.
type refreshItem struct {
	due, expires int64
	tag          [16]byte
	sum          [32]byte
}

// refreshQueue is a min-heap by due time.
type refreshQueue []refreshItem

func (q refreshQueue) Len() int           { return len(q) }
func (q refreshQueue) Less(i, j int) bool { return q[i].due < q[j].due }
func (q refreshQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *refreshQueue) Push(x any)        { *q = append(*q, x.(refreshItem)) }
func (q *refreshQueue) Pop() any {
	old := *q
	it := old[len(old)-1]
	*q = old[:len(old)-1]
	return it
}

// add schedules it.
func (r *refresher) add(it refreshItem) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	heap.Push(&r.queue, it)
	if r.queue[0] == it {
		r.wake()
	}
}

// wake starts a worker when the head is due and one may start, else arms
// the timer for the head. Under mu.
func (r *refresher) wake() {
	if len(r.queue) == 0 || r.closed {
		return
	}
	wait := time.Duration(r.queue[0].due - r.a.cache.now().UnixNano())
	if wait <= 0 {
		if r.running < r.max {
			r.running++
			go r.work()
		}
		return
	}
	if r.timer == nil {
		r.timer = time.AfterFunc(wait, r.fire)
	} else {
		r.timer.Reset(wait)
	}
}

func (r *refresher) fire() {
	r.mu.Lock()
	r.wake()
	r.mu.Unlock()
}

// work refreshes due entries until none is, starting another worker while
// more are due.
func (r *refresher) work() {
	for {
		r.mu.Lock()
		now := r.a.cache.now().UnixNano()
		if r.closed || len(r.queue) == 0 || r.queue[0].due > now {
			r.running--
			r.wake()
			r.mu.Unlock()
			return
		}
		it := heap.Pop(&r.queue).(refreshItem)
		if len(r.queue) > 0 && r.queue[0].due <= now && r.running < r.max {
			r.running++
			go r.work()
		}
		r.mu.Unlock()
		r.a.refreshNow(&it)
	}
}

// close drops what is scheduled and starts nothing more; workers finish
// their lookup.
func (r *refresher) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	r.queue = nil
	if r.timer != nil {
		r.timer.Stop()
	}
}

// scheduled is how many refreshes wait.
func (r *refresher) scheduled() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.queue)
}
