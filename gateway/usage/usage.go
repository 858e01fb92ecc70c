// Package usage counts, per vendor and per limit policy, the requests each
// gateway allowed, limited (an enforced limit refused) and shadow-limited
// (a shadow limit would have refused), so that operators see whom their
// limits refuse without a vendor label in Prometheus.
//
// The request path only adds to atomic counters that a resolved identity
// already points at: no lock, no allocation, no Redis call. A Recorder
// flushes the deltas at most every few seconds, and on Close, into a Store:
// per-minute buckets for the last hour and per-hour buckets for 25 hours,
// shared by every replica (Redis) or kept in process (Local).
package usage

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"vendorgate/gateway/policy"
)

// Policy is a limit policy's index in the gateway's policy table
// (policy.Table): a Counter counts by it (an array, no lookup on the
// request path); a flush names each index (Options.Names) and the stores
// keep the counts by policy name, so that a reordered table relabels no
// history.
type Policy int

// MaxPolicies is how many policies a vendor's counters hold: the policy
// table's capacity.
const MaxPolicies = policy.MaxPolicies

// The counters of one policy, in this order wherever they travel.
const (
	cAllowed = iota
	cLimited
	cShadow
	numCounters
)

// numValues is the length of a Counter's (and a Row's) values: numCounters
// per policy.
const numValues = MaxPolicies * numCounters

// Counter holds one vendor's counts since the last flush. Its methods are
// safe for concurrent use and a nil Counter counts nothing. A count is 32
// bits: a flush (at most a minute apart) empties it long before four
// billion requests of one vendor and policy. The vendor's name is the
// Recorder's map key: a gateway holds one Counter per active vendor.
//
// The first inlinePolicies policies of the table (the default table has
// four) are counted in the Counter itself, 64 bytes; the others in an
// array of every policy's counts made when a vendor is first counted under
// one of them (192 bytes more), instead of room for all sixteen in every
// Counter.
type Counter struct {
	c    [inlinePolicies * numCounters]atomic.Uint32
	idle int32 // flushes in a row with nothing counted (Recorder.mu)
	// wide counts the policies from inlinePolicies on (nil until one is
	// counted; its first inlinePolicies' counts stay zero).
	wide atomic.Pointer[[numValues]atomic.Uint32]
}

// counted reports whether c counted anything since it was last collected.
func (c *Counter) counted() bool {
	for i := range c.c {
		if c.c[i].Load() != 0 {
			return true
		}
	}
	if w := c.wide.Load(); w != nil {
		for i := range w {
			if w[i].Load() != 0 {
				return true
			}
		}
	}
	return false
}

// inlinePolicies is how many policies a Counter counts in itself.
const inlinePolicies = 4

// Allowed counts a request the policy allowed.
func (c *Counter) Allowed(p Policy) { c.add(p, cAllowed) }

// Limited counts a request an enforced limit of the policy refused.
func (c *Counter) Limited(p Policy) { c.add(p, cLimited) }

// ShadowLimited counts a request a shadow limit of the policy would have
// refused.
func (c *Counter) ShadowLimited(p Policy) { c.add(p, cShadow) }

func (c *Counter) add(p Policy, which int) {
	if c == nil || p < 0 || p >= MaxPolicies {
		return
	}
	i := int(p)*numCounters + which
	if i < len(c.c) {
		c.c[i].Add(1)
		return
	}
	w := c.wide.Load()
	if w == nil {
		w = new([numValues]atomic.Uint32)
		if !c.wide.CompareAndSwap(nil, w) {
			w = c.wide.Load()
		}
	}
	w[i].Add(1)
}

// Options configures a Recorder. Stores, Interval, MaxAge and MaxBytes
// are required (config holds the interval's default): New refuses a zero.
type Options struct {
	// Stores receive the flushed deltas. Each keeps a retry queue of its
	// own, so a failing store neither delays another nor makes it take a
	// flush again. Required.
	Stores []Store
	// Interval between flushes.
	Interval time.Duration
	// MaxAge bounds how long a flush is kept for a retry, by the age of
	// its minute: shorter than every store's memory of the flushes it
	// applied, so a retry is never counted twice. Older ones are dropped
	// (and counted).
	MaxAge time.Duration
	// MaxBytes bounds the memory of each store's retry queue; past it the
	// oldest flushes are dropped (and counted), the newest kept.
	MaxBytes int
	// OnFlush is told the outcome of each flush that sent or dropped
	// something. Metrics and logs.
	OnFlush func(FlushReport)
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Names is the policy table's names by index as it is now: a flush
	// stores each index's counts under its name ("" or past the end: not
	// stored). A reload that changes the table flushes first (the counts
	// of the old table under the old names).
	Names func() []string
}

// FlushReport is the outcome of one flush, summed over the stores.
type FlushReport struct {
	// Err is nil when every store took every flush it was sent.
	Err error
	// Pending is how many flushes wait for a retry, and PendingBytes the
	// memory they hold.
	Pending, PendingBytes int
	// Dropped is how many flushes were given up since the last report
	// (too old, or past MaxBytes), and DroppedCounts the requests they
	// counted.
	Dropped       int
	DroppedCounts uint64
}

// Recorder hands out Counters and flushes them.
type Recorder struct {
	o Options

	mu       sync.Mutex
	counters map[string]*Counter
	seq      uint64
	id       string // names this recorder's flushes, so a retry is applied once

	flushMu sync.Mutex // one flush at a time (ticker and Close); guards queues
	queues  []*queue
	stop    chan struct{}
	done    chan struct{}
	closed  sync.Once
}

// New returns a Recorder and starts its flusher; Close stops it after a
// last flush. It refuses options it cannot use.
func New(o Options) (*Recorder, error) {
	switch {
	case len(o.Stores) == 0 || slices.Contains(o.Stores, nil):
		return nil, errors.New("usage: stores required")
	case o.Interval <= 0:
		return nil, fmt.Errorf("usage: interval %s must be positive", o.Interval)
	case o.MaxAge <= 0:
		return nil, fmt.Errorf("usage: max age %s must be positive", o.MaxAge)
	case o.MaxBytes <= 0:
		return nil, fmt.Errorf("usage: max bytes %d must be positive", o.MaxBytes)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	r := &Recorder{o: o, counters: make(map[string]*Counter), id: newID(),
		stop: make(chan struct{}), done: make(chan struct{})}
	for _, st := range o.Stores {
		r.queues = append(r.queues, &queue{store: st})
	}
	go r.run()
	return r, nil
}

// For returns vendor's Counter, made on first use. Callers keep it beside
// the vendor's identity, so the request path never looks it up.
func (r *Recorder) For(vendor string) *Counter {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.counters[vendor]
	if !ok {
		c = new(Counter)
		r.counters[vendor] = c
	}
	return c
}

// Close flushes what was counted and stops the flusher.
func (r *Recorder) Close() {
	r.closed.Do(func() {
		close(r.stop)
		<-r.done
		r.Flush()
	})
}

// run flushes on wall-clock multiples of the interval, so that a flush
// falls on every minute's start and deltas land in the minute they were
// counted in.
func (r *Recorder) run() {
	defer close(r.done)
	for {
		now := r.o.Now()
		next := now.Truncate(r.o.Interval).Add(r.o.Interval)
		t := time.NewTimer(next.Sub(now))
		select {
		case <-r.stop:
			t.Stop()
			return
		case <-t.C:
		}
		r.Flush()
	}
}

// Flush takes the deltas counted since the last flush and hands them to
// each store's queue, which sends them with any the store failed to take.
func (r *Recorder) Flush() {
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	now := r.o.Now()
	// Deltas counted up to now belong to the minute that is ending: a flush
	// on a minute's first instant still counts into the minute before.
	d := r.collect(now.Add(-time.Nanosecond))
	oldest := now.Add(-r.o.MaxAge).Unix() / 60
	var rep FlushReport
	var errs []error
	sent := false
	for _, q := range r.queues {
		q.add(d)
		n, counts := q.trim(oldest, r.o.MaxBytes)
		rep.Dropped += n
		rep.DroppedCounts += counts
		s, err := q.send()
		sent = sent || s
		if err != nil {
			errs = append(errs, err)
		}
		rep.Pending += len(q.pending)
		rep.PendingBytes += q.bytes
	}
	rep.Err = errors.Join(errs...)
	if r.o.OnFlush != nil && (sent || rep.Dropped > 0) {
		r.o.OnFlush(rep)
	}
}

// queue is one store's flushes not yet applied, oldest first: those the
// store failed to take (tried) and, behind them, those held back while it
// fails. A held-back flush was never sent to this store, so the next one
// of the same minute is merged into it: while a store fails its queue
// grows by one flush a minute, the size of the vendors counted in it, not
// by one a flush.
type queue struct {
	store   Store
	pending []queued
	bytes   int  // the sum of pending's sizes
	failing bool // the store failed the last flush it was sent
}

type queued struct {
	d     *Delta
	size  int
	tried bool
}

// add queues d (nil: nothing counted).
func (q *queue) add(d *Delta) {
	if d == nil {
		return
	}
	if n := len(q.pending); q.failing && n > 0 {
		if last := &q.pending[n-1]; !last.tried && last.d.Minute == d.Minute && slices.Equal(last.d.Names, d.Names) {
			q.bytes -= last.size
			last.d = merge(last.d, d)
			last.size = last.d.size()
			q.bytes += last.size
			return
		}
	}
	e := queued{d: d, size: d.size()}
	q.pending = append(q.pending, e)
	q.bytes += e.size
}

// trim drops the flushes of minutes before oldest, then the oldest ones
// while the queue holds more than maxBytes, but never the newest; it
// returns how many it dropped and the requests they counted.
func (q *queue) trim(oldest int64, maxBytes int) (dropped int, counts uint64) {
	n := 0
	for ; n < len(q.pending); n++ {
		e := q.pending[n]
		tooOld := e.d.Minute < oldest
		if !tooOld && (q.bytes <= maxBytes || n == len(q.pending)-1) {
			break
		}
		q.bytes -= e.size
		counts += e.d.total()
	}
	q.pending = slices.Delete(q.pending, 0, n)
	return n, counts
}

// send sends the store the flushes it failed to take before and, once it
// has taken them all, those held back meanwhile. It reports whether it
// sent anything, and the store's first error.
func (q *queue) send() (sent bool, err error) {
	for len(q.pending) > 0 {
		n := 0
		for n < len(q.pending) && q.pending[n].tried {
			n++
		}
		if n == 0 {
			n = len(q.pending)
		}
		batch := make([]*Delta, n)
		for i := range batch {
			batch[i] = q.pending[i].d
		}
		errs := q.store.Apply(batch)
		sent = true
		// Keep what failed, oldest first, then what was not sent; let the
		// applied ones go (cleared: the array past the kept ones still
		// pointed at them).
		kept := 0
		for i := range n {
			e := q.pending[i]
			if errs == nil || errs[i] == nil {
				q.bytes -= e.size
				continue
			}
			if err == nil {
				err = errs[i]
			}
			e.tried = true
			q.pending[kept] = e
			kept++
		}
		kept += copy(q.pending[kept:], q.pending[n:])
		clear(q.pending[kept:])
		q.pending = q.pending[:kept]
		if err != nil {
			q.failing = true
			return sent, err
		}
	}
	q.failing = false
	return sent, nil
}

// collect swaps every counter to zero and returns what they held as one
// Delta stamped at; nil when nothing was counted. Counters idle for an hour
// are forgotten (an identity older than that was refreshed long ago).
func (r *Recorder) collect(at time.Time) *Delta {
	r.mu.Lock()
	defer r.mu.Unlock()
	// Room for the vendors counted, made at once: rows grown one append at
	// a time were copied over and over. One counted meanwhile grows it as
	// before.
	n := 0
	for _, c := range r.counters {
		if c.counted() {
			n++
		}
	}
	rows := make([]Row, 0, n)
	idleFlushes := int32(time.Hour / r.o.Interval)
	for v, c := range r.counters {
		var row Row
		any := false
		for i := range c.c {
			if n := c.c[i].Swap(0); n > 0 {
				row.c[i], any = n, true
			}
		}
		if w := c.wide.Load(); w != nil {
			for i := len(c.c); i < len(w); i++ {
				if n := w[i].Swap(0); n > 0 {
					row.Add(i, uint64(n))
					any = true
				}
			}
		}
		if !any {
			c.idle++
			if c.idle > idleFlushes {
				delete(r.counters, v)
			}
			continue
		}
		c.idle = 0
		row.Vendor = v
		rows = append(rows, row)
	}
	if len(rows) == 0 {
		return nil
	}
	r.seq++
	var names []string
	if r.o.Names != nil {
		names = r.o.Names()
	}
	return &Delta{ID: r.id + "-" + itoa(r.seq), Minute: at.Unix() / 60, Rows: rows, Names: names}
}

// Delta is one flush: the counts of each vendor during part of one minute.
type Delta struct {
	// ID names the flush, so that a store applies a retried one once.
	ID string
	// Minute is the Unix minute (seconds / 60) the counts belong to.
	Minute int64
	Rows   []Row
	// Names are the policies' names by index (Row.Values's policies): a
	// store keeps each count under its policy's name; an index without a
	// name ("" or past the end) is not stored.
	Names []string
}

// name is policy p's name in d, "" when none.
func (d *Delta) name(p int) string {
	if p < len(d.Names) {
		return d.Names[p]
	}
	return ""
}

// Row is one vendor's counts: per policy allowed, limited, shadow-limited,
// at index policy*3 + counter (Value, Add). Like a Counter it holds the
// first inlinePolicies policies in itself and the others in an array made
// when one is counted: 72 bytes a vendor, not 400, in every flush and in
// every one kept for a retry. A count is 32 bits, saturating: a Row holds
// at most a minute of one gateway's requests.
type Row struct {
	Vendor string
	c      [inlinePolicies * numCounters]uint32
	wide   *[numValues]uint32 // from inlinePolicies on; nil until one is counted
}

// Value is the count at index i.
func (r *Row) Value(i int) uint64 {
	if i < len(r.c) {
		return uint64(r.c[i])
	}
	if r.wide == nil {
		return 0
	}
	return uint64(r.wide[i])
}

// Add adds n to the count at index i (< MaxPolicies*3).
func (r *Row) Add(i int, n uint64) {
	var p *uint32
	if i < len(r.c) {
		p = &r.c[i]
	} else {
		if r.wide == nil {
			r.wide = new([numValues]uint32)
		}
		p = &r.wide[i]
	}
	*p = uint32(min(uint64(*p)+n, math.MaxUint32))
}

// values is r's counts by index.
func (r *Row) values() (v [numValues]uint64) {
	for i := range r.c {
		v[i] = uint64(r.c[i])
	}
	if r.wide != nil {
		for i := len(r.c); i < numValues; i++ {
			v[i] = uint64(r.wide[i])
		}
	}
	return v
}

// total is the sum of r's counts.
func (r *Row) total() (n uint64) {
	for _, v := range r.values() {
		n += v
	}
	return n
}

// size is the memory d holds, for the retry queues' bound: its rows, their
// vendors' names and their wide arrays (a name is shared with the
// recorder's map while the vendor is active: counted anyway).
func (d *Delta) size() int {
	n := int(unsafe.Sizeof(*d)) + len(d.ID) + cap(d.Rows)*int(unsafe.Sizeof(Row{}))
	for i := range d.Rows {
		n += len(d.Rows[i].Vendor)
		if d.Rows[i].wide != nil {
			n += int(unsafe.Sizeof(*d.Rows[i].wide))
		}
	}
	return n
}

// total is the requests d counted, for what a dropped flush lost.
func (d *Delta) total() (n uint64) {
	for i := range d.Rows {
		n += d.Rows[i].total()
	}
	return n
}

// merge is a new delta of a's minute and names, under b's ID, with a's
// and b's counts added by vendor. Neither is changed: either may be queued
// for another store.
func merge(a, b *Delta) *Delta {
	at := make(map[string]int, len(a.Rows))
	for i := range a.Rows {
		at[a.Rows[i].Vendor] = i
	}
	added := 0
	for i := range b.Rows {
		if _, ok := at[b.Rows[i].Vendor]; !ok {
			added++
		}
	}
	// Exactly the room needed: the merged delta may be kept for an hour.
	rows := make([]Row, len(a.Rows), len(a.Rows)+added)
	for i, row := range a.Rows {
		if row.wide != nil {
			w := *row.wide
			row.wide = &w
		}
		rows[i] = row
	}
	for i := range b.Rows {
		from := &b.Rows[i]
		j, ok := at[from.Vendor]
		if !ok {
			rows = append(rows, Row{Vendor: from.Vendor})
			j = len(rows) - 1
			at[from.Vendor] = j
		}
		to := &rows[j]
		for k, v := range from.values() {
			if v > 0 {
				to.Add(k, v)
			}
		}
	}
	return &Delta{ID: b.ID, Minute: a.Minute, Rows: rows, Names: a.Names}
}

// Store keeps the buckets.
type Store interface {
	// Apply adds each delta to its minute and hour buckets, at most once per
	// Delta.ID however often it is called. errs is nil, or one error per
	// delta (nil where that delta was applied).
	Apply(ds []*Delta) (errs []error)
	// Read returns the buckets of the minutes and hours asked for (Unix
	// minutes and Unix hours), per vendor.
	Read(minutes, hours []int64) (Buckets, error)
}

// Buckets are what a Store read: per Unix minute and per Unix hour, each
// vendor's values.
type Buckets struct {
	Minutes map[int64]map[string]Values
	Hours   map[int64]map[string]Values
}

// Values are one bucket's counts of a vendor by policy name; a policy with
// nothing counted is absent.
type Values map[string]Counts

// Counts are one policy's counts in a bucket: allowed, limited,
// shadow-limited and, in an hour, the largest allowed + limited seen in one
// minute of it (0 in a minute).
type Counts struct {
	Allowed, Limited, ShadowLimited, Peak uint64
}

// zero reports whether nothing was counted.
func (c Counts) zero() bool { return c == Counts{} }
