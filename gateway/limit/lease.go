package limit

import (
	"cmp"
	"hash/maphash"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"vendorgate/gateway/policy"
)

// Leases: a gateway decides most requests of a busy bucket itself. When a
// request of the bucket goes to Redis (its lease is empty), its call asks
// for want tokens: its own and the next lease's. The script charges as many
// of them as fit now (at most a quarter of what the bucket has left after
// the request's own: near exhaustion none), and this gateway then admits
// that many more requests of the bucket without asking Redis. A request is
// admitted locally only with a token from every bucket it is subject to;
// one that lacks a token in some bucket asks Redis for those (its other
// tokens reserved meanwhile, and given back if Redis refuses).
//
// Lease size follows demand: want, the request's own token and the lease,
// is how many requests of the bucket this gateway admitted over the last
// lease period (two windows of lease_ttl, the older weighted by how much of
// it is still within a period), at most lease_max. A bucket with at most
// one request in the last period, or whose previous request came a lease
// period ago or more, gets no lease. (One more, for the request's own
// token, charged about 7 % fewer buckets at the many-vendor load, and held
// a token more at each replica: two gateways taking turns on a vendor
// under a tight shadow twin counted one refusal too many.) Lease_max 1 is no lease at all: every request asks
// Redis, strictly exact.
//
// What leases cost in exactness: a token charged at t and spent up to
// lease_ttl later lets other gateways' charges meanwhile see a bucket that
// looks emptier than it is. Admissions replayed through GCRA at the times
// they happened never exceed what a burst of burst + ceil(rate × lease_ttl)
// allows, whatever the number of gateways.
//
// A lease lives lease_ttl from the moment its call was made; what is left
// at expiry, on a reload and at shutdown goes back to Redis (a refund: only
// what is still in the bucket's future, never another gateway's later
// charge). It is honoured only while Redis has answered this gateway within
// the limiter's timeout (a heartbeat keeps that known while leases are
// held; with a Cluster, every master must have answered it); a failed round trip or the breaker opening drops every lease, and
// its tokens are lost until the bucket refills.
type leases struct {
	max   atomic.Int64 // tokens asked at most per bucket; 1: no leases
	ttl   atomic.Int64 // a lease's life, ns
	epoch atomic.Uint64
	// lastGrant is when a lease was last granted (ns, the limiter's clock):
	// none is held a lease_ttl after it, and the heartbeat rests.
	lastGrant atomic.Int64
	// fresh reports whether Redis answered within the limiter's timeout.
	fresh  func() bool
	seed   maphash.Seed
	shards [localShards]leaseShard
	hooks  LeaseHooks

	mu      sync.Mutex
	refunds []refund
}

// LeaseHooks are told what happens to leased tokens, for metrics; each is
// optional.
type LeaseHooks struct {
	// Granted: tokens leased beyond the requests' own.
	Granted func(n int)
	// Spent: a request admitted from a lease, without asking Redis.
	Spent func()
	// Refunded: unused tokens queued to go back (at expiry, reload, close).
	Refunded func(n int)
	// Dropped: unused tokens lost with Redis (a failure, the breaker), or
	// given back by a refused request after their lease was sent back.
	Dropped func(n int)
}

type leaseShard struct {
	mu sync.Mutex
	m  map[string]bucketLease
}

// bucketLease is one bucket's demand at this gateway and its lease.
type bucketLease struct {
	// Demand: requests in the window that started at win and in the one
	// before it; last is the latest request (ns, the limiter's clock).
	win, last int64
	cur, prev int32

	tokens int32 // unused tokens of the lease
	// older of tokens are an earlier grant's, merged in (two requests'
	// grants at once), charged up to olderTAT; they are spent first and
	// refunded by their own TAT.
	older    int32
	olderTAT int64
	// olderAfter of older are positioned past olderTAT (a later grant's
	// tokens folded in): their refund is not capped at olderTAT.
	olderAfter int32
	burst      int32  // the bucket's burst at the grant
	remGrant   int32  // what Redis had left at the grant
	gen        uint32 // bumped at each grant, refund and drop
	// refunded: bit i set when the lease of generation gen-1-i was sent
	// back or dropped rather than spent to the end (see giveBack).
	refunded   uint8
	epoch      uint64 // leases.epoch at the grant
	expires    int64  // ns, the limiter's clock
	grantedAt  int64  // ns, the limiter's clock
	resetGrant int64  // the bucket's reset at the grant, ns
	emission   int64  // ns
	tatGrantUS int64  // the bucket's TAT after the grant, µs since 2017 (Redis' clock)
	// The grant's run's TIME (µs since 2017; 0: not known) and
	// Redis.refundSeq when its answer came, for the newer segment and
	// the older (see ownRefunds).
	atUS, olderAtUS int64
	seq, olderSeq   uint64
}

// refund is unused tokens of one bucket going back (see gcraSource).
type refund struct {
	key        string // the Redis key
	emission   float64
	unused     int
	tatGrantUS int64
	// after of unused are positioned past tatGrantUS (a later grant's,
	// folded in): the refund may reach that far past it.
	after int
	// seq is Redis.refundSeq when the grant's answer came, atUS the TIME
	// of the run that charged it, µs since 2017 (0: not known): see
	// ownRefunds.
	seq  uint64
	atUS int64
}

func newLeases(max int, ttl time.Duration, fresh func() bool, h LeaseHooks) *leases {
	l := &leases{fresh: fresh, seed: maphash.MakeSeed(), hooks: h}
	l.lastGrant.Store(math.MinInt64 / 2)
	l.set(max, ttl)
	for i := range l.shards {
		l.shards[i].m = make(map[string]bucketLease)
	}
	return l
}

// set changes lease_max and lease_ttl (a reload; checkLeases has passed
// them); leases held keep their expiry.
func (l *leases) set(max int, ttl time.Duration) {
	l.max.Store(int64(max))
	l.ttl.Store(int64(ttl))
}

// on reports whether leases are granted at all.
func (l *leases) on() bool { return l.max.Load() > 1 }

func (l *leases) shard(key string) *leaseShard {
	return &l.shards[maphash.String(l.seed, key)%localShards]
}

// take is one request's visit to its bucket's lease: with a token left
// (the lease current and Redis answering), it takes it and returns the
// bucket's result and the lease's generation, ok; otherwise it returns how
// many tokens the request's Redis call should ask for the bucket.
// answered says Redis has just answered this request (its second pass):
// the lease is honoured without asking whether Redis answered lately.
func (l *leases) take(key string, now int64, answered bool) (res Result, t ticket, want int, ok bool) {
	ttl := l.ttl.Load()
	sh := l.shard(key)
	sh.mu.Lock()
	e := sh.m[key]
	e.roll(now, ttl)
	if e.tokens > 0 {
		switch {
		case e.epoch != l.epoch.Load():
			l.dropped(&e)
		case now >= e.expires:
			l.refund(key, &e)
		case answered || l.fresh():
			t = ticket{gen: e.gen, epoch: e.epoch, tatUS: e.tatGrantUS, expires: e.expires}
			e.tokens--
			if e.older > 0 { // the earliest first
				t.older, t.after, t.tatUS = true, e.older <= e.olderAfter, e.olderTAT
				e.older--
				e.olderAfter = min(e.olderAfter, e.older)
			}
			e.cur++
			e.last = now
			res = e.result(now)
			sh.m[key] = e
			sh.mu.Unlock()
			if l.hooks.Spent != nil {
				l.hooks.Spent()
			}
			return res, t, 0, true
		}
	}
	// A lease still holding tokens (Redis not heard from lately) needs no
	// more: the request asks Redis for its own token only.
	want = 1
	if m := l.max.Load(); m > 1 && e.tokens == 0 && e.last != 0 && now-e.last < ttl {
		f := float64(now-e.win) / float64(ttl)
		est := float64(e.cur) + float64(e.prev)*(1-f)
		want = int(min(max(est+0.5, 1), float64(m)))
	}
	sh.m[key] = e
	sh.mu.Unlock()
	return Result{}, ticket{}, want, false
}

// ticket is a token taken from a lease: enough to give it back.
type ticket struct {
	gen     uint32
	epoch   uint64
	tatUS   int64 // the TAT of the grant it came from
	expires int64 // its lease's expiry: the token is spent before it
	older   bool  // from the older segment
	after   bool  // of the older segment's tokens positioned past its TAT
}

// roll moves the demand windows on to now.
func (e *bucketLease) roll(now, ttl int64) {
	switch d := now - e.win; {
	case e.win == 0:
		e.win = now
	case d >= ttl:
		if d < 2*ttl {
			e.prev = e.cur
		} else {
			e.prev = 0
		}
		e.cur = 0
		e.win += d / ttl * ttl
	}
}

// result is the bucket's state after a token was taken locally: Redis'
// remaining at the grant plus the lease's unused tokens (at most the
// burst), and the reset less what those tokens hold.
func (e *bucketLease) result(now int64) Result {
	rem := min(int(e.remGrant)+int(e.tokens), int(e.burst))
	reset := max(e.resetGrant-(now-e.grantedAt)-int64(e.tokens)*e.emission, 0)
	return Result{Known: true, Allowed: true, Remaining: rem, ResetAfter: time.Duration(reset)}
}

// giveBack returns a token taken for a request that was refused after all
// (another of its buckets refused it). It goes back to the lease it came
// from, expired or not (an expired lease is sent back whole later). When
// that lease has run out and been granted anew meanwhile (other requests
// spent the rest), the token joins the new lease's older segment, under
// the earlier of the two grants' TATs: its grant was never sent back, and
// one refund of the segment reckons its future once; the new lease then
// expires no later than the token's own did (no token is spent more than
// lease_ttl after its charge). When its lease or
// any lease since was sent back or dropped meanwhile (a later lease may
// have held another token of its grant, given back to it), or Redis
// failed since, the token is lost (a second refund of one grant would
// reckon its future twice and could erase another gateway's later
// charge): its bucket stays charged for it until it refills.
func (l *leases) giveBack(key string, t ticket, now int64) {
	if !l.putBack(key, t, now) && l.hooks.Dropped != nil {
		l.hooks.Dropped(1)
	}
}

// putBack is giveBack without the count of a token lost: it reports
// whether the token went back to a lease.
func (l *leases) putBack(key string, t ticket, now int64) bool {
	sh := l.shard(key)
	sh.mu.Lock()
	e, ok := sh.m[key]
	back := ok && t.epoch == l.epoch.Load() && e.epoch == t.epoch
	switch {
	case !back:
	case e.gen == t.gen && !t.older && t.tatUS == e.tatGrantUS:
		e.tokens++ // the segment it came from
	case e.gen == t.gen,
		// t's lease and every one since were spent to the end (none sent
		// back: one may have held a token of t's grant), and e is live.
		e.gen-t.gen <= 8 && e.refunded&(1<<(e.gen-t.gen)-1) == 0 && e.tokens > 0 && now < e.expires:
		if t.after { // positioned past t.tatUS: a whole interval at most
			if e.older == 0 {
				e.olderTAT, e.olderAtUS = t.tatUS, 0
			}
			e.older++
			e.olderAfter++
		} else {
			e.addOlder(1, t.tatUS, 0, 0) // its grant's run not known here
		}
		e.tokens++
		e.expires = min(e.expires, t.expires)
	default:
		back = false
	}
	if back {
		sh.m[key] = e
	}
	sh.mu.Unlock()
	return back
}

// grant is what Redis granted a request's call for one bucket of rate r:
// res the bucket's result, granted the tokens charged (the request's own
// and its lease), tatUS the bucket's TAT after them. epoch is leases.epoch
// when the call was made, sent when (ns, the limiter's clock): a lease lives lease_ttl
// from then, and none is installed when Redis failed meanwhile. Tokens
// here are requests of r's cost: a lease never holds part of one. When a
// lease was installed, own is the ticket of the request's own token as if
// taken from it (so that a refund of the request goes back to the lease,
// which one refund of the grant then reckons once) and leased is true.
func (l *leases) grant(key string, r policy.Rate, res Result, g grant, seq, epoch uint64, sent, now int64) (own ticket, leased bool) {
	granted, tatUS := g.n, g.tatUS
	sh := l.shard(key)
	sh.mu.Lock()
	e := sh.m[key]
	e.roll(now, l.ttl.Load())
	e.cur++ // demand is what was admitted
	e.last = now
	current := epoch == l.epoch.Load()
	// A lease still good (requests asked at once, or while Redis had not
	// answered lately) is kept, and takes the new tokens in as a second
	// segment: the merged lease keeps the earlier expiry (no token lives
	// past its own charge plus lease_ttl, replies may be handled out of
	// order), and each segment is refunded by its own grant's TAT, so that
	// a refund never reckons another gateway's charges made between the
	// two grants as this lease's. A third grant folds the two earliest
	// segments into one under the earlier TAT (a refund of it may then
	// give back less than it could, never more).
	merge := e.tokens > 0 && current && e.epoch == epoch && now < e.expires
	if e.tokens > 0 && !merge {
		if e.epoch == l.epoch.Load() {
			l.refund(key, &e)
		} else {
			l.dropped(&e)
		}
	}
	if granted > 1 && current {
		if merge {
			e.addSegment(int32(granted-1), tatUS, g.atUS, seq)
			e.expires = min(e.expires, sent+l.ttl.Load())
		} else {
			e.tokens = int32(granted - 1)
			e.older, e.olderAfter = 0, 0
			e.refunded <<= 1 // the last lease was spent to the end, or sent back above
			e.gen++
			e.epoch = epoch
			e.expires = sent + l.ttl.Load()
			e.tatGrantUS = tatUS
			e.atUS, e.seq = g.atUS, seq
		}
		e.grantedAt = now
		e.burst = int32(capacity(r))
		e.remGrant = int32(res.Remaining)
		e.resetGrant = int64(res.ResetAfter)
		e.emission = interval(r)
		l.lastGrant.Store(now)
		own, leased = ticket{gen: e.gen, epoch: e.epoch, tatUS: tatUS, expires: e.expires}, true
	}
	sh.m[key] = e
	sh.mu.Unlock()
	if granted > 1 && l.hooks.Granted != nil {
		l.hooks.Granted(granted - 1)
	}
	if granted > 1 && !current && l.hooks.Dropped != nil {
		l.hooks.Dropped(granted - 1) // Redis failed while the call was out: no lease
	}
	return own, leased
}

// addSegment merges n tokens granted up to tatUS into e's lease, which
// holds tokens: the segment with the latest TAT stays the newer one, the
// others are the older, under the earliest of their TATs.
func (e *bucketLease) addSegment(n int32, tatUS, atUS int64, seq uint64) {
	newer := e.tokens - e.older
	switch {
	case tatUS >= e.tatGrantUS: // the usual order: the new grant is the latest
		if e.older > 0 {
			e.olderAfter += newer // past olderTAT, up to the last grant's
		} else {
			e.olderTAT, e.olderAtUS, e.olderSeq = e.tatGrantUS, e.atUS, e.seq
		}
		e.older += newer
		e.tatGrantUS, e.atUS, e.seq = tatUS, atUS, seq
	default: // an earlier grant's reply came last
		e.addOlder(n, tatUS, atUS, seq)
	}
	e.tokens += n
}

// addOlder counts n tokens positioned at or before tatUS (µs) in e's older
// segment (the caller counts them in e.tokens). The segment keeps the
// earliest TAT, and the tokens past it count as after: a refund gives back
// at most what lies in the future below the TAT and a whole emission
// interval for each of those, never more than they can hold.
//
// atUS and seq are the new tokens' grant's (see ownRefunds; atUS 0: not
// known); the segment keeps its TAT's grant's, and none known when two
// grants share it.
func (e *bucketLease) addOlder(n int32, tatUS, atUS int64, seq uint64) {
	switch {
	case e.older == 0:
		e.older, e.olderTAT, e.olderAfter = n, tatUS, 0
		e.olderAtUS, e.olderSeq = atUS, seq
	case tatUS == e.olderTAT:
		e.older += n
		if atUS != e.olderAtUS || seq != e.olderSeq {
			e.olderAtUS = 0
		}
	case tatUS < e.olderTAT: // the segment's tokens now lie past its TAT
		e.olderAfter = e.older
		e.older += n
		e.olderTAT = tatUS
		e.olderAtUS, e.olderSeq = atUS, seq
	default: // the new tokens lie past it
		e.older += n
		e.olderAfter += n
	}
}

// refund queues e's unused tokens to go back; the caller holds e's shard.
// A token taken from the lease meanwhile cannot be given back to it: a
// second refund of the lease would reckon what is still in the future
// again, and could erase a later charge.
func (l *leases) refund(key string, e *bucketLease) {
	// The later segment first: a refund applies only while the stored TAT
	// is at least its grant's, and the later one's is the higher.
	if n := int(e.tokens - e.older); n > 0 {
		l.queue(key, e.emission, n, e.tatGrantUS, 0, e.atUS, e.seq)
	}
	if e.older > 0 {
		l.queue(key, e.emission, int(e.older), e.olderTAT, int(e.olderAfter), e.olderAtUS, e.olderSeq)
	}
	e.tokens, e.older, e.olderAfter = 0, 0, 0
	e.refunded = e.refunded<<1 | 1
	e.gen++
}

// queue queues n unused tokens of key's lease, granted up to tatUS by a
// run at atUS answered at seq, to go back.
func (l *leases) queue(key string, emission int64, n int, tatUS int64, after int, atUS int64, seq uint64) {
	l.mu.Lock()
	l.refunds = append(l.refunds, refund{key: keyPrefix + key, emission: float64(emission) / float64(time.Second),
		unused: n, tatGrantUS: tatUS, after: after, atUS: atUS, seq: seq})
	l.mu.Unlock()
	if l.hooks.Refunded != nil {
		l.hooks.Refunded(n)
	}
}

// dropped loses e's unused tokens; the caller holds e's shard.
func (l *leases) dropped(e *bucketLease) {
	n := int(e.tokens)
	e.tokens, e.older, e.olderAfter = 0, 0, 0
	e.refunded = e.refunded<<1 | 1
	e.gen++
	if l.hooks.Dropped != nil {
		l.hooks.Dropped(n)
	}
}

// holds reports whether key's lease holds tokens that are current at now
// (whether or not Redis has answered lately).
func (l *leases) holds(key string, now int64) bool {
	sh := l.shard(key)
	sh.mu.Lock()
	e := sh.m[key]
	sh.mu.Unlock()
	return e.tokens > 0 && e.epoch == l.epoch.Load() && now < e.expires
}

// drop loses every lease at once (Redis failed): each is dropped when next
// touched.
func (l *leases) drop() { l.epoch.Add(1) }

// held reports whether a lease may hold tokens at now.
func (l *leases) held(now int64) bool { return now-l.lastGrant.Load() < l.ttl.Load() }

// sweep queues the refunds of leases expired at now, or of every lease when
// all is set (a reload, shutdown), forgets buckets idle for two lease
// periods, and returns the refunds queued so far.
func (l *leases) sweep(now int64, all bool) []refund {
	ttl := l.ttl.Load()
	epoch := l.epoch.Load()
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			switch {
			case e.tokens > 0 && e.epoch != epoch:
				l.dropped(&e)
				sh.m[k] = e
			case e.tokens > 0 && (all || now >= e.expires):
				l.refund(k, &e)
				sh.m[k] = e
			case e.tokens == 0 && now-e.last > 2*ttl:
				delete(sh.m, k)
			}
		}
		sh.mu.Unlock()
	}
	l.mu.Lock()
	out := l.refunds
	l.refunds = nil
	l.mu.Unlock()
	// A bucket's refunds go back latest grant first: each applies only
	// while the stored TAT is at least its grant's, and an earlier one
	// applied first would lower it below a later grant's.
	slices.SortStableFunc(out, func(a, b refund) int {
		if c := strings.Compare(a.key, b.key); c != 0 {
			return c
		}
		return cmp.Compare(b.tatGrantUS, a.tatGrantUS)
	})
	return out
}

// len is the number of buckets tracked, for tests.
func (l *leases) len() int {
	n := 0
	for i := range l.shards {
		l.shards[i].mu.Lock()
		n += len(l.shards[i].m)
		l.shards[i].mu.Unlock()
	}
	return n
}
