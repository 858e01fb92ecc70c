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
	"sync"
	"sync/atomic"
	"time"

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

// Options configures a Recorder. Store, Interval and MaxPending are
// required (config holds the interval's default): New refuses a zero.
type Options struct {
	// Store receives the flushed deltas. Required.
	Store Store
	// Interval between flushes.
	Interval time.Duration
	// MaxPending bounds the flushes kept for retry while the store fails;
	// past it the oldest is dropped (and counted).
	MaxPending int
	// OnFlush is told the outcome of each flush: the error (nil when every
	// pending delta reached the store), how many flushes wait for a retry,
	// and how many were dropped since the last call. Metrics and logs.
	OnFlush func(err error, pending, dropped int)
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Names is the policy table's names by index as it is now: a flush
	// stores each index's counts under its name ("" or past the end: not
	// stored). A reload that changes the table flushes first (the counts
	// of the old table under the old names).
	Names func() []string
}

// Recorder hands out Counters and flushes them.
type Recorder struct {
	o Options

	mu       sync.Mutex
	counters map[string]*Counter
	seq      uint64
	id       string // names this recorder's flushes, so a retry is applied once
	pending  []*Delta

	flushMu sync.Mutex // one flush at a time (ticker and Close)
	stop    chan struct{}
	done    chan struct{}
	closed  sync.Once
}

// New returns a Recorder and starts its flusher; Close stops it after a
// last flush. It refuses options it cannot use.
func New(o Options) (*Recorder, error) {
	switch {
	case o.Store == nil:
		return nil, errors.New("usage: store required")
	case o.Interval <= 0:
		return nil, fmt.Errorf("usage: interval %s must be positive", o.Interval)
	case o.MaxPending <= 0:
		return nil, fmt.Errorf("usage: max pending %d must be positive", o.MaxPending)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	r := &Recorder{o: o, counters: make(map[string]*Counter), id: newID(),
		stop: make(chan struct{}), done: make(chan struct{})}
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

// Flush takes the deltas counted since the last flush and sends them, with
// any earlier ones the store failed to take, in one call to the store.
func (r *Recorder) Flush() {
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	// Deltas counted up to now belong to the minute that is ending: a flush
	// on a minute's first instant still counts into the minute before.
	at := r.o.Now().Add(-time.Nanosecond)
	d := r.collect(at)
	r.mu.Lock()
	if d != nil {
		r.pending = append(r.pending, d)
	}
	dropped := 0
	if over := len(r.pending) - r.o.MaxPending; over > 0 {
		dropped = over
		r.pending = append(r.pending[:0], r.pending[over:]...)
	}
	batch := append([]*Delta(nil), r.pending...)
	r.mu.Unlock()
	if len(batch) == 0 {
		if r.o.OnFlush != nil && dropped > 0 {
			r.o.OnFlush(nil, 0, dropped)
		}
		return
	}
	errs := r.o.Store.Apply(batch)
	var first error
	r.mu.Lock()
	kept := r.pending[:0]
	for i, d := range batch {
		if errs != nil && errs[i] != nil {
			if first == nil {
				first = errs[i]
			}
			kept = append(kept, d)
		}
	}
	// Deltas appended meanwhile cannot exist: Flush holds flushMu and only
	// Flush appends; keep what failed, oldest first, and let the applied
	// ones go (the array past kept still pointed at them: a vendor's row
	// held until the next flush).
	clear(r.pending[len(kept):])
	r.pending = kept
	pending := len(r.pending)
	r.mu.Unlock()
	if r.o.OnFlush != nil {
		r.o.OnFlush(first, pending, dropped)
	}
}

// collect swaps every counter to zero and returns what they held as one
// Delta stamped at; nil when nothing was counted. Counters idle for an hour
// are forgotten (an identity older than that was refreshed long ago).
func (r *Recorder) collect(at time.Time) *Delta {
	r.mu.Lock()
	defer r.mu.Unlock()
	// Room for the vendors counted, made at once: rows of 400 bytes grown
	// one append at a time were copied over and over (20 MB made for
	// 10,000 vendors' 4). One counted meanwhile grows it as before.
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
			n := uint64(c.c[i].Swap(0))
			row.Values[i] = n
			any = any || n > 0
		}
		if w := c.wide.Load(); w != nil {
			for i := len(c.c); i < len(w); i++ {
				n := uint64(w[i].Swap(0))
				row.Values[i] = n
				any = any || n > 0
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

// Row is one vendor's counts: per policy allowed, limited, shadow-limited.
type Row struct {
	Vendor string
	Values [numValues]uint64
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
