package window

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"vendorgate/gateway/limit/redisconn"
	"vendorgate/gateway/policy"
)

// Leased quotas (a quota row's lease: true). A gateway takes a slice of a
// quota window's counter at once (leaseScript: the counter counts it
// whole, in Redis) and admits the requests of the slice itself; what a
// slice has not used when its lease ends (lease_ttl after its call, or at
// its window's end, whichever comes first) goes back to the counter it was
// taken from. A token is counted in Redis before a request spends it, in
// the window that request falls in, so a leased quota never admits more
// than its rate in a window while Redis keeps its counters. It may refuse
// below it: while another gateway holds an unused slice (at most
// lease_max tokens of a bucket, and an eighth of what was left when it
// was taken), or after a slice that never came back (a gateway that died
// holding it, a give-back Redis did not answer for giveBackRetry): at
// most the slice, for the rest of that window. A give-back counts once
// however often it is sent (see giveBack). A slice follows demand: a bucket's first
// request in a lease period takes its own token only (exact), then each
// call asks for as many as the bucket had requests in the last period, at
// most lease_max. lease_max 1 is no lease: every request asks Redis, as an
// exact quota does.
//
// A request whose checks are not all leased quotas (a sliding window, an
// exact quota) is decided by chargeScript, exactly, as before.

// quotaLeases are one limiter's leases, by the quota's bucket name.
type quotaLeases struct {
	max atomic.Int64 // tokens a call asks for at most; 1: no leases
	ttl atomic.Int64 // a lease's life, ms
	off atomic.Bool  // closed: the quotas are asked of Redis, exactly
	// closing is held (read) by a leased charge, so that Close gives back
	// what the charges running took.
	closing sync.RWMutex
	seq     atomic.Uint64 // names the give-backs

	mu      sync.Mutex
	m       map[string]*quotaLease
	back    []giveBack // what goes back at the next sweep (or Close)
	sending []giveBack // what a sweep is sending back now
	// sent counts the tokens given back that Redis answered for, lost
	// those given up on (not answered for giveBackRetry).
	sent, lost atomic.Uint64
}

// quotaLease is one bucket's lease at this gateway, and its demand.
type quotaLease struct {
	start  int64 // the quota window (Unix seconds) the tokens were counted in
	tokens int   // unused tokens
	until  int64 // ms, the limiter's clock: the tokens are spent before it
	end    int64 // ms: the window's end, on the limiter's clock, at the latest
	used   int   // the counter after this gateway's last call
	taken  int64 // ms: when the last call that granted tokens began
	win    time.Duration
	// Demand: requests since the period began (n) and in the one before.
	since   int64
	n, prev int
}

// giveBack is unused tokens of a quota window's counter: its bucket and
// the window's start. Its id makes it count once, however often it is
// sent (a give-back whose answer was lost is sent again; a Redis Cluster
// client sends a pipeline again after a node's timeout): Redis keeps a
// mark of each id applied (the bucket's name, ":g" and the id) for
// giveBackMark, well past giveBackRetry.
type giveBack struct {
	bucket string
	start  int64
	n      int
	id     string
	since  int64 // ms, the limiter's clock: first queued
}

// How long a give-back is tried again, and how long Redis remembers one
// applied.
const (
	giveBackRetry = 10 * time.Minute
	giveBackMark  = time.Hour
)

// giveBackMarkMS is giveBackMark as both scripts that give back take it:
// milliseconds, as a script's argument.
var giveBackMarkMS = strconv.FormatInt(giveBackMark.Milliseconds(), 10)

// giveBack is n tokens of bucket's window start to give back, named.
func (l *Redis) giveBack(bucket string, start int64, n int, now int64) giveBack {
	return giveBack{bucket: bucket, start: start, n: n, id: l.prefix + "g" + strconv.FormatUint(l.leases.seq.Add(1), 36), since: now}
}

func newQuotaLeases(max int, ttl time.Duration) *quotaLeases {
	q := &quotaLeases{m: make(map[string]*quotaLease)}
	q.set(max, ttl)
	return q
}

func (q *quotaLeases) set(max int, ttl time.Duration) {
	q.max.Store(int64(max))
	q.ttl.Store(ttl.Milliseconds())
}

// want is what bucket le's next call asks for at now: the requests of the
// last lease period, this one's included, at most most, at least one.
func (le *quotaLease) want(now, ttl, most int64) int {
	if now-le.since >= ttl {
		if now-le.since < 2*ttl {
			le.prev = le.n
		} else {
			le.prev = 0
		}
		le.n, le.since = 0, now
	}
	le.n++
	return int(min(most, int64(max(le.n, le.prev, 1))))
}

// leased reports whether every check of cs is a leased quota, and leases
// are on.
func (l *Redis) leased(cs *policy.Checks) bool {
	if l.leases == nil || l.leases.max.Load() <= 1 || l.leases.off.Load() || 2+leaseArgs*cs.Count > redisconn.MaxArgs {
		return false // (past what one call carries: 11 quotas on a route, decided exactly)
	}
	for i := 0; i < cs.Count; i++ {
		if r := &cs.List[i].Rate; r.Kind != policy.Quota || !r.Lease {
			return false
		}
	}
	return true
}

// leaseArgs is leaseScript's arguments a check.
const leaseArgs = 6

// chargeLeased decides cs (leased quotas only) from this gateway's leases,
// and asks Redis (leaseScript, one call) only for the checks whose lease
// is spent or ended. A token taken for a request that is refused after
// all (another check full) goes back to its lease. ok is false when the
// leases were closed meanwhile: nothing was decided.
func (l *Redis) chargeLeased(cs policy.Checks) (d Decision, ok bool, err error) {
	q := l.leases
	q.closing.RLock()
	defer q.closing.RUnlock()
	if q.off.Load() {
		return d, false, nil
	}
	d.leased = true
	now, ttl, most := l.clock(), q.ttl.Load(), q.max.Load()
	var got [policy.MaxChecks]bool
	var want [policy.MaxChecks]int
	var back [policy.MaxChecks]giveBack
	ask := false
	q.mu.Lock()
	for i := 0; i < cs.Count; i++ {
		c := &cs.List[i]
		le := q.m[c.Key]
		if le == nil {
			le = &quotaLease{since: now}
			q.m[c.Key] = le
		}
		w := le.want(now, ttl, most)
		if le.tokens > 0 && now < le.until {
			le.tokens--
			got[i] = true
			l.fromLease(&d.Results[i], le, now)
			continue
		}
		if le.tokens > 0 { // ended unused: back with this call
			back[i] = l.giveBack(c.Key, le.start, le.tokens, now)
			le.tokens = 0
		}
		want[i], ask = w, true
	}
	q.mu.Unlock()
	if ask {
		if err := l.take(&cs, &d, now, &want, &back, &got); err != nil {
			l.putBack(&cs, &d, &got, now) // the tokens taken from leases
			q.mu.Lock()
			for i := 0; i < cs.Count; i++ { // sent or not, sent again: once
				if back[i].n > 0 {
					q.back = append(q.back, back[i])
				}
			}
			q.mu.Unlock()
			return Decision{}, true, err
		}
	}
	d.decide(&cs)
	if !d.Allowed {
		l.putBack(&cs, &d, &got, now)
	}
	return d, true, nil
}

// fromLease fills r for a token spent from le at now.
func (l *Redis) fromLease(r *Result, le *quotaLease, now int64) {
	r.Allowed, r.charged, r.start = true, true, le.start
	r.Used = max(le.used-le.tokens, 0) // what this gateway knows is spent
	r.ResetAfter = time.Duration(max(le.end-now, 0)) * time.Millisecond
	r.Window = le.win
}

// take asks Redis for the checks of want (their slices) and gives back
// back; each check granted a token spends one, the rest goes to its
// lease.
func (l *Redis) take(cs *policy.Checks, d *Decision, now int64, want *[policy.MaxChecks]int, back *[policy.MaxChecks]giveBack, got *[policy.MaxChecks]bool) error {
	call, keys, args, err := l.call(cs.Count, 2+leaseArgs*cs.Count)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	keys, args = keys[:cs.Count], args[:2]
	args[0], args[1] = giveBackMarkMS, ""
	if l.now != nil {
		args[1] = strconv.FormatInt(now, 10)
	}
	for i := 0; i < cs.Count; i++ {
		c := &cs.List[i]
		keys[i] = keyPrefix + c.Key
		days := int64(c.Rate.Calendar.Days)
		if c.Rate.Calendar.Month {
			days = 0
		}
		args = append(args, days, c.Rate.Limit, want[i], back[i].start, back[i].n, back[i].id)
	}
	raw, err := l.run(call, leaseScript, keys, args)
	if err != nil {
		if errors.Is(err, redisconn.ErrBusy) {
			return err
		}
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	vals, err := integers(raw, 6*cs.Count)
	if err != nil {
		err = fmt.Errorf("window: %w for %d leased checks", err, cs.Count)
		l.failed(err)
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	created := false
	q := l.leases
	q.mu.Lock()
	for i := 0; i < cs.Count; i++ {
		if want[i] == 0 {
			continue
		}
		v := vals[6*i : 6*i+6]
		grant, used, reset := int(v[0].(int64)), int(v[1].(int64)), v[2].(int64)
		win, start := time.Duration(v[3].(int64))*time.Millisecond, v[4].(int64)
		created = created || v[5].(int64) == 1
		c := &cs.List[i]
		le := q.m[c.Key]
		if le == nil { // dropped meanwhile (Redis lost its data)
			le = &quotaLease{since: now}
			q.m[c.Key] = le
		}
		// The window's end and the lease's, on this gateway's clock from
		// the call's start: Redis read its clock after that, so both are
		// early, never late.
		end := now + reset
		until := min(end, now+q.ttl.Load())
		if grant > 0 {
			if v[5].(int64) == 1 && le.start == start && le.tokens > 0 {
				// The counter this lease's tokens were counted in is gone
				// (Redis lost its data): spent or given back, they would
				// be counted nowhere, or taken off others' count.
				le.tokens = 0
			}
			if le.tokens > 0 && (le.start != start || now >= le.until) {
				// Another call's tokens, of an older window or ended.
				q.back = append(q.back, l.giveBack(c.Key, le.start, le.tokens, now))
				le.tokens = 0
			}
			if le.tokens == 0 {
				le.start, le.until, le.used = start, until, used
			} else { // another call's lease of the same window, running
				le.until, le.used = max(le.until, until), max(le.used, used)
			}
			le.end, le.win, le.taken = end, win, now
			le.tokens += grant - 1 // one for this request
			got[i] = true
			l.fromLease(&d.Results[i], le, now)
			continue
		}
		r := &d.Results[i]
		r.Used, r.Window = used, win
		r.ResetAfter = time.Duration(max(reset, 0)) * time.Millisecond
		r.RetryAfter = r.ResetAfter
	}
	q.mu.Unlock()
	if (created || !l.known.Load()) && l.checking.CompareAndSwap(false, true) {
		l.checkFrom.Store(now)
		go l.checkMarker()
	}
	return nil
}

// putBack returns the tokens a request took from leases (got) and did
// not spend: refused, or its call failed.
func (l *Redis) putBack(cs *policy.Checks, d *Decision, got *[policy.MaxChecks]bool, now int64) {
	for i := 0; i < cs.Count; i++ {
		if got[i] {
			l.giveOne(cs.List[i].Key, d.Results[i].start, now)
			d.Results[i].charged = false
			got[i] = false
		}
	}
}

// giveOne returns one token of bucket's window start: to its lease while
// it runs, else to the counter at the next sweep.
func (l *Redis) giveOne(bucket string, start, now int64) {
	q := l.leases
	q.mu.Lock()
	defer q.mu.Unlock()
	if le := q.m[bucket]; le != nil && le.start == start && now < le.until {
		le.tokens++
		return
	}
	q.back = append(q.back, l.giveBack(bucket, start, 1, now))
}

// sweeper gives back, every lease_ttl, what ended leases did not use, and
// forgets buckets idle for two lease periods.
func (l *Redis) sweeper() {
	defer close(l.swept)
	for {
		ttl := time.Duration(l.leases.ttl.Load()) * time.Millisecond
		select {
		case <-l.stop:
			l.sweep(true)
			return
		case <-time.After(ttl):
			l.sweep(false)
		}
	}
}

// sweep sends back the unused tokens of every ended lease (of every lease
// when all: at Close), and what refunds queued.
func (l *Redis) sweep(all bool) {
	q := l.leases
	now, ttl := l.clock(), q.ttl.Load()
	q.mu.Lock()
	for k, le := range q.m {
		if le.tokens > 0 && (all || now >= le.until) {
			q.back = append(q.back, l.giveBack(k, le.start, le.tokens, now))
			le.tokens = 0
		}
		if le.tokens == 0 && now-le.since >= 2*ttl {
			delete(q.m, k)
		}
	}
	back := q.back
	q.back, q.sending = nil, back
	q.mu.Unlock()
	if len(back) == 0 {
		return
	}
	defer func() {
		q.mu.Lock()
		q.sending = nil
		q.mu.Unlock()
	}()
	n := 0
	for _, b := range back {
		n += b.n
	}
	if err := l.sendBack(back); err != nil {
		// Sent again at the next sweep (each counts once), for
		// giveBackRetry; past it, the counter keeps them (refusals early in
		// this window, never an admission over it).
		l.failed(fmt.Errorf("window: %d leased quota tokens not given back yet: %w", n, err))
		lost := 0
		q.mu.Lock()
		q.sending = nil // queued again instead
		for _, b := range back {
			if now-b.since < giveBackRetry.Milliseconds() {
				q.back = append(q.back, b)
			} else {
				lost += b.n
			}
		}
		q.mu.Unlock()
		q.lost.Add(uint64(lost))
		return
	}
	q.sent.Add(uint64(n))
}

// sendBack runs giveBackScript for each of back (redisconn.RunScripts: one
// pipeline, one a node on a Redis Cluster, by digest, then whole for
// those that met NOSCRIPT); the first error, if any.
func (l *Redis) sendBack(back []giveBack) error {
	ctx, cancel := context.WithTimeout(context.Background(), max(l.o.Timeout, time.Second))
	defer cancel()
	keys := make([][]string, len(back))
	args := make([][]any, len(back))
	for i, b := range back {
		keys[i] = []string{keyPrefix + quotaKey(b.bucket, b.start), keyPrefix + b.bucket + ":g" + b.id}
		args[i] = []any{b.n, giveBackMarkMS}
	}
	_, err := redisconn.RunScripts(ctx, l.o.Client, giveBackScript, keys, args)
	return err
}

// held is what this gateway holds unspent of bucket's window start: in
// its lease, queued to go back, and going back.
func (l *Redis) held(bucket string, start int64) int {
	q := l.leases
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	if le := q.m[bucket]; le != nil && le.start == start {
		n += le.tokens
	}
	for _, bs := range [][]giveBack{q.back, q.sending} {
		for _, b := range bs {
			if b.bucket == bucket && b.start == start {
				n += b.n
			}
		}
	}
	return n
}

// dropLeases forgets the leases and what was to go back from before the
// charge whose call found a counter gone: Redis lost its data, so the
// counters they were counted in are gone.
func (l *Redis) dropLeases() {
	if l.leases == nil {
		return
	}
	// What was taken and queued from the charge that asked for the check
	// on was counted after the loss: kept.
	since := l.checkFrom.Load()
	q := l.leases
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, le := range q.m {
		if le.taken < since {
			le.tokens = 0
		}
	}
	kept := q.back[:0]
	for _, b := range q.back {
		if b.since >= since {
			kept = append(kept, b)
		}
	}
	clear(q.back[len(kept):])
	q.back = kept
}

// SetLeases changes lease_max and lease_ttl (a reload). What the leases
// hold goes back (at the next sweep): a reload may change a quota's
// limit, or its calendar, and the next requests take slices under the
// new one.
func (l *Redis) SetLeases(max int, ttl time.Duration) {
	if l.leases == nil {
		return
	}
	q := l.leases
	q.set(max, ttl)
	now := l.clock()
	q.mu.Lock()
	defer q.mu.Unlock()
	for k, le := range q.m {
		if le.tokens > 0 {
			q.back = append(q.back, l.giveBack(k, le.start, le.tokens, now))
			le.tokens = 0
		}
	}
}

// clock is the limiter's clock in milliseconds: the test's, or monotonic
// time since the limiter began.
func (l *Redis) clock() int64 {
	if l.now != nil {
		return l.now()
	}
	return time.Since(l.epoch).Milliseconds()
}
