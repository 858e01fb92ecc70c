package auth

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// cacheShards spreads entries over locks; a key's tag picks its shard.
// The bound is on the whole table, not per shard: keys hash unevenly.
const cacheShards = 64

// evictionSample is how many entries eviction looks at to pick one.
const evictionSample = 8

// never is the refresh time of an entry that is never refreshed, scheduled
// that of one whose refresh is scheduled (Schedule).
const (
	never     = math.MaxInt64
	scheduled = math.MaxInt64 - 1
)

// CacheOptions bounds the key cache. Every size and TTL is required
// (config holds the settings' defaults): NewCache refuses a zero.
type CacheOptions struct {
	// Size is the most working keys (and expired ones) kept: a cache of
	// size N holds N keys before it evicts one.
	Size int
	// NegativeSize is the most unknown and revoked keys kept. They live in a
	// table of their own, so that a flood of them never evicts a working
	// key.
	NegativeSize int
	// TTL of a resolved key while the backend's invalidations do not reach
	// the cache (no Redis, or the subscription broken): the bound on how
	// long a revocation can go unseen.
	TTL time.Duration
	// PushedTTL of a working key stored while invalidations reach the cache
	// (PushesFlowing): a revocation drops it at once, so it may live long.
	// A gap in the pushes shortens it to TTL from the gap's start. At
	// least TTL.
	PushedTTL time.Duration
	// NegativeTTL of an unknown key: long enough to shield the backend
	// from a flood of one bad key, short enough that a new key works at
	// once.
	NegativeTTL time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// Cache is the bounded in-process key cache, keyed by the tag of the whole
// key (Tag: a hash under this process's own secret seeds), each entry
// holding the key's SHA-256 too, by which it is refreshed and invalidated. Working keys and negative entries (unknown or revoked keys)
// are kept in two tables, each bounded, so that negative entries never
// evict a working key. Lookups by tag take the same path whatever the
// secret, so its timing says nothing about a key.
//
// A working key is due for a refresh (Get says so) before it expires
// (refreshPoint), the point set by its hash so that keys cached together
// are not refreshed together; the authenticator refreshes it in the
// background, and requests keep using the entry meanwhile.
type Cache struct {
	pos, neg  cacheTable
	ttl       int64
	pushedTTL int64
	negTTL    int64
	now       func() time.Time
	// gen counts invalidations and changes of the push state: a lookup
	// that started before one must not cache what it read.
	gen atomic.Uint64
	// pushes is whether invalidations reach the cache (PushesFlowing).
	pushes        atomic.Bool
	invalidations atomic.Uint64
	refreshes     atomic.Uint64
	// refreshFailures counts background lookups that failed, refreshesLate
	// scheduled refreshes that found their entry expired before a lookup
	// slot came free (the lookups cannot keep up).
	refreshFailures, refreshesLate atomic.Uint64
}

// cacheTable is one bounded table of entries, spread over locks.
type cacheTable struct {
	shards [cacheShards]cacheShard
	size   int64
	count  atomic.Int64
}

type cacheShard struct {
	mu        sync.RWMutex
	m         map[[16]byte]cacheEntry
	hits      atomic.Uint64
	misses    atomic.Uint64
	evictions atomic.Uint64
	_         [40]byte // keep shards on separate cache lines
}

type cacheEntry struct {
	id      *Identity // nil: the key is unknown
	expires int64     // unix ns
	refresh int64     // unix ns from which a request starts a refresh; never for negative entries
	// sum is the key's SHA-256: what a refresh looks it up by and what an
	// invalidation names it by.
	sum [32]byte
}

// negative reports whether id belongs in the negative table.
func negative(id *Identity) bool { return id == nil || id.Revoked }

// NewCache returns an empty cache, or refuses bounds it cannot use.
// Invalidations count as not pushed until PushesFlowing.
func NewCache(o CacheOptions) (*Cache, error) {
	switch {
	case o.Size <= 0:
		return nil, fmt.Errorf("auth: cache size %d must be positive", o.Size)
	case o.NegativeSize <= 0:
		return nil, fmt.Errorf("auth: cache negative size %d must be positive", o.NegativeSize)
	case o.TTL <= 0:
		return nil, fmt.Errorf("auth: cache ttl %s must be positive", o.TTL)
	case o.PushedTTL < o.TTL:
		return nil, fmt.Errorf("auth: cache pushed ttl %s must be at least the ttl %s", o.PushedTTL, o.TTL)
	case o.NegativeTTL <= 0:
		return nil, fmt.Errorf("auth: cache negative ttl %s must be positive", o.NegativeTTL)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	c := &Cache{ttl: int64(o.TTL), pushedTTL: int64(o.PushedTTL), negTTL: int64(o.NegativeTTL), now: o.Now}
	c.pos.init(o.Size)
	c.neg.init(o.NegativeSize)
	return c, nil
}

func (t *cacheTable) init(size int) {
	t.size = int64(size)
	for i := range t.shards {
		t.shards[i].m = make(map[[16]byte]cacheEntry)
	}
}

func (t *cacheTable) shard(tag *[16]byte) *cacheShard { return &t.shards[tag[0]%cacheShards] }

// Get returns the entry of the key whose tag (Tag) is tag. found is false on a miss or an expired
// entry; id is nil for an unknown key. refresh is true when the entry, a
// working key, is due for a refresh. It counts hits; the caller counts a
// miss with Missed once the key is worth a lookup (a key that fails its MAC
// is no miss of this cache).
func (c *Cache) Get(tag *[16]byte) (id *Identity, found, refresh bool) {
	now := c.now().UnixNano()
	sh := c.pos.shard(tag)
	sh.mu.RLock()
	e, ok := sh.m[*tag]
	sh.mu.RUnlock()
	if !ok {
		nsh := c.neg.shard(tag)
		nsh.mu.RLock()
		e, ok = nsh.m[*tag]
		nsh.mu.RUnlock()
	}
	if !ok || e.expires <= now {
		return nil, false, false
	}
	sh.hits.Add(1)
	return e.id, true, e.refresh <= now
}

// Missed counts a miss of the key of tag.
func (c *Cache) Missed(tag *[16]byte) { c.pos.shard(tag).misses.Add(1) }

// Refreshing counts a refresh started (a lookup no request waits for).
func (c *Cache) Refreshing() { c.refreshes.Add(1) }

// RefreshFailed counts a background lookup that failed.
func (c *Cache) RefreshFailed() { c.refreshFailures.Add(1) }

// RefreshLate counts a scheduled refresh whose entry expired before it ran.
func (c *Cache) RefreshLate() { c.refreshesLate.Add(1) }

// Generation is read before a lookup and handed to Put.
func (c *Cache) Generation() uint64 { return c.gen.Load() }

// refreshPoint is when an entry of tag living from now until expires is
// due for a refresh, spread by the key's tag: between three quarters and
// seven eighths of a long life (pushed: a key requested every minute or so
// is refreshed once per life, well under PushedTTL's lookups), between two
// fifths and a half of a short one (TTL: a window of 15 s of 30, so that a
// key requested every few seconds is refreshed before it expires rather
// than looked up on the request path).
func (c *Cache) refreshPoint(tag *[16]byte, now, expires int64) int64 {
	life := expires - now
	if life > c.ttl {
		return now + life/4*3 + life/8*int64(tag[1])/256
	}
	return now + life/5*2 + life/10*int64(tag[1])/256
}

// Put stores id (nil: unknown key) under tag, with sum, the key's
// SHA-256 (Sum), unless an invalidation or a change of
// the push state happened since gen was read, so that a lookup racing a
// revocation does not cache the old answer. Unknown and revoked keys go to
// the negative table.
func (c *Cache) Put(tag *[16]byte, sum *[32]byte, id *Identity, gen uint64) {
	now := c.now().UnixNano()
	into, other := &c.pos, &c.neg
	if negative(id) {
		into, other = &c.neg, &c.pos
	}
	// A key that moved between tables (revoked since it was cached) leaves
	// the other one; the two locks are never held together.
	osh := other.shard(tag)
	osh.mu.Lock()
	if _, ok := osh.m[*tag]; ok {
		delete(osh.m, *tag)
		other.count.Add(-1)
	}
	osh.mu.Unlock()
	sh := into.shard(tag)
	sh.mu.Lock()
	if c.gen.Load() != gen {
		sh.mu.Unlock()
		return
	}
	// Read under the lock, after gen: a gap that starts after this point
	// shortens this entry too (PushesStopped walks the shards after
	// changing gen).
	var e cacheEntry
	switch {
	case id == nil:
		e = cacheEntry{expires: now + c.negTTL, refresh: never, sum: *sum}
	case id.Revoked:
		e = cacheEntry{id: id, expires: now + c.ttl, refresh: never, sum: *sum}
	case c.pushes.Load():
		e = cacheEntry{id: id, expires: now + c.pushedTTL, sum: *sum}
	default:
		e = cacheEntry{id: id, expires: now + c.ttl, sum: *sum}
	}
	if e.refresh == 0 {
		e.refresh = c.refreshPoint(tag, now, e.expires)
	}
	_, existed := sh.m[*tag]
	sh.m[*tag] = e
	sh.mu.Unlock()
	if !existed && into.count.Add(1) > into.size {
		into.evictOne(tag, now)
	}
}

// evictOne removes one entry other than keep: an expired one if one of the
// first few looked at is, else the one of them that expires first (map
// order is random: a sample, without an LRU list on the hot path). It
// starts at keep's shard and moves on while a shard has nothing else.
func (t *cacheTable) evictOne(keep *[16]byte, now int64) {
	start := int(keep[0] % cacheShards)
	for i := 0; i < cacheShards; i++ {
		sh := &t.shards[(start+i)%cacheShards]
		sh.mu.Lock()
		var victim [16]byte
		found := false
		soonest := int64(math.MaxInt64)
		n := 0
		for k, e := range sh.m {
			if k == *keep {
				continue
			}
			if e.expires < soonest {
				victim, soonest, found = k, e.expires, true
			}
			if e.expires <= now {
				break
			}
			if n++; n >= evictionSample {
				break
			}
		}
		if found {
			delete(sh.m, victim)
			t.count.Add(-1)
			sh.evictions.Add(1)
		}
		sh.mu.Unlock()
		if found {
			return
		}
	}
}

// Schedule marks tag's working entry, due for a refresh, as scheduled and
// says when its refresh should run (due, unix ns), the entry's expiry and
// the key's SHA-256 to look it up by;
// ok is false when there is no such entry, or its refresh is not due or
// scheduled already. An entry with more than TTL left (cached while pushes
// flow) is refreshed at once; one with less, a fifth of TTL before it
// expires, so that a key requested at least once per half TTL is looked
// up about once per TTL rather than once per request.
func (c *Cache) Schedule(tag *[16]byte) (due, expires int64, sum [32]byte, ok bool) {
	now := c.now().UnixNano()
	sh := c.pos.shard(tag)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.m[*tag]
	if !ok || e.id == nil || e.refresh > now || e.expires <= now {
		return 0, 0, sum, false
	}
	due = now
	if e.expires-now <= c.ttl {
		due = max(now, e.expires-c.ttl/5)
	}
	e.refresh = scheduled
	sh.m[*tag] = e
	return due, e.expires, e.sum, true
}

// Scheduled returns the identity of tag's entry if it is the one a refresh
// was scheduled for (expires), its refresh still scheduled.
func (c *Cache) Scheduled(tag *[16]byte, expires int64) (*Identity, bool) {
	sh := c.pos.shard(tag)
	sh.mu.RLock()
	e, ok := sh.m[*tag]
	sh.mu.RUnlock()
	if !ok || e.id == nil || e.refresh != scheduled || e.expires != expires {
		return nil, false
	}
	return e.id, true
}

// Postpone moves the refresh of tag's working entry to at least d from now,
// after a refresh failed: the entry serves until it expires, and requests
// meanwhile do not retry the lookup each.
func (c *Cache) Postpone(tag *[16]byte, d time.Duration) {
	at := c.now().UnixNano() + int64(d)
	sh := c.pos.shard(tag)
	sh.mu.Lock()
	if e, ok := sh.m[*tag]; ok && (e.refresh < at || e.refresh == scheduled) {
		e.refresh = at
		sh.m[*tag] = e
	}
	sh.mu.Unlock()
}

// PushesFlowing says that the backend's invalidations reach the cache from
// now on: working keys stored from now live PushedTTL. The working keys
// cached before are dropped and so looked up again: an invalidation
// published before the subscription (the gateway's start, or a gap in it)
// was never heard, and one the backend could not publish while Redis was
// down will never be, so a revocation missed in an outage outlives the
// outage by no more than a lookup. It returns how many keys it dropped.
// Negative entries are kept: no announcement makes a key work again.
func (c *Cache) PushesFlowing() (dropped int) {
	// gen first: a lookup that started before must not be stored at all,
	// and one that starts after reads the backend after the subscription.
	c.gen.Add(1)
	for i := range c.pos.shards {
		sh := &c.pos.shards[i]
		sh.mu.Lock()
		n := len(sh.m)
		clear(sh.m)
		c.pos.count.Add(-int64(n))
		sh.mu.Unlock()
		dropped += n
	}
	c.invalidations.Add(uint64(dropped))
	c.pushes.Store(true)
	return dropped
}

// PushesStopped says that invalidations may have been missed since
// lastHeard, the last time the subscription was known to work: every
// entry expires at most TTL after it (its refresh is due at once for an
// entry older than that bound allows), as if the cache had never had
// pushes.
func (c *Cache) PushesStopped(lastHeard time.Time) {
	c.pushes.Store(false)
	c.gen.Add(1)
	now := c.now().UnixNano()
	bound := lastHeard.UnixNano() + c.ttl
	for _, t := range []*cacheTable{&c.pos, &c.neg} {
		for i := range t.shards {
			sh := &t.shards[i]
			sh.mu.Lock()
			for k, e := range sh.m {
				if e.expires > bound {
					e.expires = bound
					if e.refresh != never {
						e.refresh = min(e.refresh, c.refreshPoint(&k, now, bound))
					}
					sh.m[k] = e
				}
			}
			sh.mu.Unlock()
		}
	}
}

// Pushed reports whether invalidations reach the cache.
func (c *Cache) Pushed() bool { return c.pushes.Load() }

// InvalidateKey drops the entry of the key whose SHA-256 is sum, as the
// backend names a revoked key. Entries are found by their tag, which the
// SHA-256 does not give: it walks the whole cache, comparing each entry's
// sum (about 1 to 2 ms at 100,000 keys, once per revocation heard; an
// index by SHA-256 would cost every cached key a second map entry).
func (c *Cache) InvalidateKey(sum *[32]byte) {
	c.gen.Add(1)
	for _, t := range []*cacheTable{&c.pos, &c.neg} {
		for i := range t.shards {
			sh := &t.shards[i]
			sh.mu.Lock()
			for k, e := range sh.m {
				if e.sum == *sum {
					delete(sh.m, k)
					t.count.Add(-1)
					c.invalidations.Add(1)
				}
			}
			sh.mu.Unlock()
		}
	}
}

// InvalidateVendor drops every key of a vendor (status or services changed).
// It walks the whole cache: rare, and cheaper than an index on every Put.
func (c *Cache) InvalidateVendor(vendorID string) {
	c.gen.Add(1)
	for _, t := range []*cacheTable{&c.pos, &c.neg} {
		for i := range t.shards {
			sh := &t.shards[i]
			sh.mu.Lock()
			for k, e := range sh.m {
				if e.id != nil && e.id.VendorID == vendorID {
					delete(sh.m, k)
					t.count.Add(-1)
					c.invalidations.Add(1)
				}
			}
			sh.mu.Unlock()
		}
	}
}

// Purge drops everything.
func (c *Cache) Purge() {
	c.gen.Add(1)
	for _, t := range []*cacheTable{&c.pos, &c.neg} {
		for i := range t.shards {
			sh := &t.shards[i]
			sh.mu.Lock()
			n := len(sh.m)
			clear(sh.m)
			t.count.Add(-int64(n))
			sh.mu.Unlock()
			c.invalidations.Add(uint64(n))
		}
	}
}

// Stats are the cache's counters since start, for metrics. Entries counts
// working keys, NegativeEntries unknown and revoked ones; Evictions both.
// Misses are requests that waited for a lookup, Refreshes lookups no
// request waited for (RefreshFailures of them failed); RefreshesLate are
// scheduled refreshes that found their entry expired before they ran.
type Stats struct {
	Hits, Misses, Refreshes, Evictions, Invalidations uint64
	RefreshFailures, RefreshesLate                    uint64
	Entries, NegativeEntries                          int
}

// Stats sums the shards' counters.
func (c *Cache) Stats() Stats {
	var s Stats
	for _, t := range []*cacheTable{&c.pos, &c.neg} {
		for i := range t.shards {
			sh := &t.shards[i]
			s.Hits += sh.hits.Load()
			s.Misses += sh.misses.Load()
			s.Evictions += sh.evictions.Load()
		}
	}
	s.Entries, s.NegativeEntries = int(c.pos.count.Load()), int(c.neg.count.Load())
	s.Refreshes = c.refreshes.Load()
	s.Invalidations = c.invalidations.Load()
	s.RefreshFailures, s.RefreshesLate = c.refreshFailures.Load(), c.refreshesLate.Load()
	return s
}
