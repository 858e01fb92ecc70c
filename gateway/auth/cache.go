package auth

import (
	"sync"
	"sync/atomic"
	"time"
)

// cacheShards spreads entries over locks; a key's SHA-256 picks its shard.
const cacheShards = 64

// CacheOptions bounds the key cache.
type CacheOptions struct {
	// Size is the most working keys (and expired ones) kept. Default 100000.
	Size int
	// NegativeSize is the most unknown and revoked keys kept. They live in a
	// table of their own, so that a flood of them never evicts a working
	// key. Default a tenth of Size (at least cacheShards).
	NegativeSize int
	// TTL of a resolved key. Default 30s: without Redis invalidation it is
	// the bound on how long a revocation can go unseen.
	TTL time.Duration
	// NegativeTTL of an unknown key. Default 5s: long enough to shield the
	// backend from a flood of one bad key, short enough that a new key
	// works at once.
	NegativeTTL time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// Cache is the bounded in-process key cache, keyed by the SHA-256 of the
// whole key. Working keys and negative entries (unknown or revoked keys)
// are kept in two tables, each bounded, so that negative entries never
// evict a working key. Lookups by hash take the same path whatever the
// secret, so its timing says nothing about a key.
type Cache struct {
	pos, neg cacheTable
	ttl      int64
	negTTL   int64
	now      func() time.Time
	// gen counts invalidations: a lookup that started before one must not
	// cache what it read.
	gen           atomic.Uint64
	invalidations atomic.Uint64
}

// cacheTable is one bounded table of entries, spread over locks.
type cacheTable struct {
	shards   [cacheShards]cacheShard
	perShard int
}

type cacheShard struct {
	mu        sync.RWMutex
	m         map[[32]byte]cacheEntry
	hits      atomic.Uint64
	misses    atomic.Uint64
	evictions atomic.Uint64
	_         [40]byte // keep shards on separate cache lines
}

type cacheEntry struct {
	id      *Identity // nil: the key is unknown
	expires int64     // unix ns
}

// negative reports whether id belongs in the negative table.
func negative(id *Identity) bool { return id == nil || id.Revoked }

// NewCache returns an empty cache.
func NewCache(o CacheOptions) *Cache {
	if o.Size <= 0 {
		o.Size = 100000
	}
	if o.NegativeSize <= 0 {
		o.NegativeSize = max(cacheShards, o.Size/10)
	}
	if o.TTL <= 0 {
		o.TTL = 30 * time.Second
	}
	if o.NegativeTTL <= 0 {
		o.NegativeTTL = 5 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	c := &Cache{ttl: int64(o.TTL), negTTL: int64(o.NegativeTTL), now: o.Now}
	c.pos.init(o.Size)
	c.neg.init(o.NegativeSize)
	return c
}

func (t *cacheTable) init(size int) {
	t.perShard = max(1, size/cacheShards)
	for i := range t.shards {
		t.shards[i].m = make(map[[32]byte]cacheEntry)
	}
}

func (t *cacheTable) shard(sum *[32]byte) *cacheShard { return &t.shards[sum[0]%cacheShards] }

// Get returns the entry for sum. found is false on a miss or an expired
// entry; id is nil for an unknown key. It counts hits; the caller counts a
// miss with Missed once the key is worth a lookup (a key that fails its MAC
// is no miss of this cache).
func (c *Cache) Get(sum *[32]byte) (id *Identity, found bool) {
	now := c.now().UnixNano()
	sh := c.pos.shard(sum)
	sh.mu.RLock()
	e, ok := sh.m[*sum]
	sh.mu.RUnlock()
	if !ok {
		nsh := c.neg.shard(sum)
		nsh.mu.RLock()
		e, ok = nsh.m[*sum]
		nsh.mu.RUnlock()
	}
	if !ok || e.expires <= now {
		return nil, false
	}
	sh.hits.Add(1)
	return e.id, true
}

// Missed counts a miss of sum.
func (c *Cache) Missed(sum *[32]byte) { c.pos.shard(sum).misses.Add(1) }

// Generation is read before a lookup and handed to Put.
func (c *Cache) Generation() uint64 { return c.gen.Load() }

// Put stores id (nil: unknown key) unless an invalidation happened since gen
// was read, so that a lookup racing a revocation does not cache the old
// answer. Unknown and revoked keys go to the negative table.
func (c *Cache) Put(sum *[32]byte, id *Identity, gen uint64) {
	ttl, into, other := c.ttl, &c.pos, &c.neg
	if negative(id) {
		into, other = &c.neg, &c.pos
		if id == nil {
			ttl = c.negTTL
		}
	}
	now := c.now().UnixNano()
	// A key that moved between tables (revoked since it was cached) leaves
	// the other one; the two locks are never held together.
	osh := other.shard(sum)
	osh.mu.Lock()
	delete(osh.m, *sum)
	osh.mu.Unlock()
	sh := into.shard(sum)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if c.gen.Load() != gen {
		return
	}
	if _, ok := sh.m[*sum]; !ok && len(sh.m) >= into.perShard {
		sh.evictOne(now)
	}
	sh.m[*sum] = cacheEntry{id: id, expires: now + ttl}
}

// evictOne removes an expired entry if one of the first few looked at is,
// else an arbitrary one (map order is random): bounded memory without an
// LRU list on the hot path.
func (sh *cacheShard) evictOne(now int64) {
	var victim [32]byte
	n := 0
	for k, e := range sh.m {
		victim = k
		if e.expires <= now || n >= 8 {
			break
		}
		n++
	}
	delete(sh.m, victim)
	sh.evictions.Add(1)
}

// InvalidateKey drops the entry of one key hash.
func (c *Cache) InvalidateKey(sum *[32]byte) {
	c.gen.Add(1)
	for _, t := range []*cacheTable{&c.pos, &c.neg} {
		sh := t.shard(sum)
		sh.mu.Lock()
		if _, ok := sh.m[*sum]; ok {
			delete(sh.m, *sum)
			c.invalidations.Add(1)
		}
		sh.mu.Unlock()
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
					c.invalidations.Add(1)
				}
			}
			sh.mu.Unlock()
		}
	}
}

// Purge drops everything, for when invalidations may have been missed (the
// subscription was re-established).
func (c *Cache) Purge() {
	c.gen.Add(1)
	for _, t := range []*cacheTable{&c.pos, &c.neg} {
		for i := range t.shards {
			sh := &t.shards[i]
			sh.mu.Lock()
			n := len(sh.m)
			clear(sh.m)
			sh.mu.Unlock()
			c.invalidations.Add(uint64(n))
		}
	}
}

// Stats are the cache's counters since start, for metrics. Entries counts
// working keys, NegativeEntries unknown and revoked ones; Evictions both.
type Stats struct {
	Hits, Misses, Evictions, Invalidations uint64
	Entries, NegativeEntries               int
}

// Stats sums the shards' counters.
func (c *Cache) Stats() Stats {
	var s Stats
	for ti, t := range []*cacheTable{&c.pos, &c.neg} {
		for i := range t.shards {
			sh := &t.shards[i]
			s.Hits += sh.hits.Load()
			s.Misses += sh.misses.Load()
			s.Evictions += sh.evictions.Load()
			sh.mu.RLock()
			if ti == 0 {
				s.Entries += len(sh.m)
			} else {
				s.NegativeEntries += len(sh.m)
			}
			sh.mu.RUnlock()
		}
	}
	s.Invalidations = c.invalidations.Load()
	return s
}
