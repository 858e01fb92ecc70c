package auth

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"vendorgate/gateway/policy"

	"vendorgate/shared/apikey"
	"vendorgate/shared/wire"
)

// table is a Lookup over a map, counting calls.
type table struct {
	m     map[string]*wire.KeyResolution
	calls atomic.Int64
}

func (t *table) Lookup(_ context.Context, h string) (*wire.KeyResolution, error) {
	t.calls.Add(1)
	return t.m[h], nil
}

const testSigningSecret = "auth-test-key-signing-secret-0123456789"

func testSigner(t testing.TB) *apikey.Signer {
	t.Helper()
	s, err := apikey.NewSigner([]string{testSigningSecret})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// signedKey is a key this deployment could have issued.
func signedKey(t testing.TB) string {
	t.Helper()
	k, err := testSigner(t).Generate(apikey.DefaultPrefixes(), apikey.Sandbox)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newAuth(t testing.TB, size int) (*Authenticator, *table, string) {
	key := signedKey(t)
	tb := &table{m: map[string]*wire.KeyResolution{apikey.Hash(key): {KeyID: "k1", VendorID: "v1", Environment: "sandbox",
		ExpiresAt: time.Now().Add(time.Hour), Vendor: wire.VendorInfo{Status: wire.VendorApproved}}}}
	a, err := New(Options{Prefixes: apikey.DefaultPrefixes(), Signer: testSigner(t), Cache: testCache(t, CacheOptions{Size: size}), Lookup: tb,
		MaxRefreshes: testMaxRefreshes})
	if err != nil {
		t.Fatal(err)
	}
	return a, tb, key
}

func authn(a *Authenticator, key string) (*Identity, error) {
	return a.Authenticate([]byte(key), nil, nil)
}

func TestCacheHitAndInvalidation(t *testing.T) {
	a, tb, key := newAuth(t, 100)
	layout := policy.NewLayout([]policy.Policy{{Rate: policy.Rate{Name: "reads"}}, {Rate: policy.Rate{Name: "key-reads"}, Scope: policy.PerKey}}, nil)
	for i := 0; i < 3; i++ {
		id, err := authn(a, key)
		if err != nil || id.KeyID != "k1" {
			t.Fatalf("%v %+v", err, id)
		}
		if b := id.Buckets(layout); b.Name(0) != (policy.Bucket{Key: "vg:{v:v1}:reads", Twin: "vg:{v:v1}:reads:twin"}) ||
			b.Name(1) != (policy.Bucket{Key: "vg:{v:v1}:k:k1:reads", Twin: "vg:{v:v1}:k:k1:reads:twin"}) {
			t.Fatalf("buckets %+v", b)
		}
	}
	if tb.calls.Load() != 1 {
		t.Fatalf("%d lookups, want 1", tb.calls.Load())
	}
	sum := Sum([]byte(key))
	a.Cache().InvalidateKey(&sum)
	_, _ = authn(a, key)
	a.Cache().InvalidateVendor("v1")
	_, _ = authn(a, key)
	if tb.calls.Load() != 3 {
		t.Fatalf("%d lookups after invalidations, want 3", tb.calls.Load())
	}
	if s := a.Cache().Stats(); s.Invalidations != 2 || s.Hits != 2 {
		t.Fatalf("%+v", s)
	}
}

func TestCacheBounded(t *testing.T) {
	c := testCache(t, CacheOptions{Size: 128})
	for i := 0; i < 10000; i++ {
		var sum [32]byte
		sum[0], sum[1], sum[2] = byte(i), byte(i>>8), byte(i>>16)
		id := (*Identity)(nil)
		if i%2 == 0 {
			id = &Identity{VendorID: "v1"}
		}
		c.Put(tagOf(&sum), &sum, id, c.Generation())
	}
	if s := c.Stats(); s.Entries > 128 || s.NegativeEntries > 64 || s.Evictions == 0 {
		t.Fatalf("%+v", s)
	}
}

func TestLookupRacingInvalidationIsNotCached(t *testing.T) {
	c := testCache(t, CacheOptions{})
	var sum [32]byte
	gen := c.Generation()
	c.InvalidateVendor("v1") // the revocation lands while the lookup is in flight
	c.Put(tagOf(&sum), &sum, &Identity{VendorID: "v1"}, gen)
	if _, found, _ := c.Get(tagOf(&sum)); found {
		t.Fatal("a stale lookup was cached")
	}
}

func TestSentinels(t *testing.T) {
	a, tb, key := newAuth(t, 100)
	first := "Q"
	if key[9] == 'Q' { // another key, whatever the random first character
		first = "R"
	}
	cases := map[string]error{
		"":                                    ErrMissingKey,
		"x":                                   ErrMalformed,
		"zzzzzzzz_" + key[9:]:                 ErrForeignKey,
		key[:9] + first + key[10:]:            ErrBadSignature,
		"vgsandbx_" + strings.Repeat("A", 43): ErrBadSignature,
		"vgsandbx_" + strings.Repeat("A", 50): ErrBadSignature,
		signedKey(t):                          ErrUnknownKey,
	}
	for k, want := range cases {
		if _, err := authn(a, k); !errors.Is(err, want) {
			t.Errorf("%q: %v, want %v", k, err, want)
		}
	}
	if c := tb.calls.Load(); c != 1 {
		t.Fatalf("%d lookups, want 1 (the signed unknown key only)", c)
	}
	if s := a.Cache().Stats(); s.Entries != 0 || s.NegativeEntries != 1 {
		t.Fatalf("cache %+v: want only the signed unknown key, as a negative entry", s)
	}
}

// TestUnsignedKeysAreNeitherLookedUpNorCached: random well-formed keys
// never reach the lookup or the cache, however many.
func TestUnsignedKeysAreNeitherLookedUpNorCached(t *testing.T) {
	a, tb, _ := newAuth(t, 100)
	for i := 0; i < 1000; i++ {
		var b [32]byte
		_, _ = rand.Read(b[:])
		k := "vgsandbx_" + base64.RawURLEncoding.EncodeToString(b[:])
		if _, err := authn(a, k); !errors.Is(err, ErrBadSignature) {
			t.Fatalf("%d: %v, want ErrBadSignature", i, err)
		}
	}
	if c, s := tb.calls.Load(), a.Cache().Stats(); c != 0 || s.Entries+s.NegativeEntries != 0 || s.Misses != 0 {
		t.Fatalf("%d lookups, cache %+v: want none", c, s)
	}
}

// TestNegativeEntriesNeverEvictWorkingKeys: unknown and revoked keys fill
// their own table; the working keys cached before stay cached.
func TestNegativeEntriesNeverEvictWorkingKeys(t *testing.T) {
	c := testCache(t, CacheOptions{Size: 128, NegativeSize: 64})
	good := make([][32]byte, 64)
	for i := range good {
		good[i][0], good[i][1] = byte(i), 1
		c.Put(tagOf(&good[i]), &good[i], &Identity{VendorID: "v1"}, c.Generation())
	}
	for i := 0; i < 10000; i++ {
		var sum [32]byte
		sum[0], sum[1], sum[2], sum[3] = byte(i), byte(i>>8), byte(i>>16), 2
		id := (*Identity)(nil)
		if i%2 == 0 {
			id = &Identity{VendorID: "v2", Revoked: true}
		}
		c.Put(tagOf(&sum), &sum, id, c.Generation())
	}
	for i := range good {
		if id, found, _ := c.Get(tagOf(&good[i])); !found || id == nil {
			t.Fatalf("working key %d evicted by negative entries", i)
		}
	}
	if s := c.Stats(); s.Entries != len(good) || s.NegativeEntries > 64 || s.Evictions == 0 {
		t.Fatalf("%+v", s)
	}
	// A revocation moves the key to the negative table.
	c.Put(tagOf(&good[0]), &good[0], &Identity{VendorID: "v1", Revoked: true}, c.Generation())
	if id, found, _ := c.Get(tagOf(&good[0])); !found || id == nil || !id.Revoked {
		t.Fatalf("revoked key: %+v %v", id, found)
	}
	if s := c.Stats(); s.Entries != len(good)-1 {
		t.Fatalf("the revoked key stayed among working keys: %+v", s)
	}
}

func FuzzKeyParser(f *testing.F) {
	a, _, key := newAuth(f, 1000)
	for _, s := range []string{key, "", "vgsandbx_", "vglive01_" + key[9:], key + "x", "vgsandbx_\x00\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := authn(a, s)
		if err == nil && s != key {
			t.Fatalf("%q authenticated", s)
		}
		if err == nil && id == nil {
			t.Fatal("no identity")
		}
	})
}

func BenchmarkCacheHit(b *testing.B) {
	a, _, key := newAuth(b, 1000)
	raw := []byte(key)
	if _, err := a.Authenticate(raw, nil, nil); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := a.Authenticate(raw, nil, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// gate is a Lookup that holds every call until opened, counting calls.
type gate struct {
	table
	started chan struct{}
	open    chan struct{}
}

func (g *gate) Lookup(_ context.Context, h string) (*wire.KeyResolution, error) {
	g.started <- struct{}{}
	<-g.open
	return g.table.Lookup(context.Background(), h)
}

// TestConcurrentMissesShareOneLookup: requests that miss the cache on the
// same key at once wait for one lookup instead of each making their own,
// unless an invalidation came after that lookup started.
func TestConcurrentMissesShareOneLookup(t *testing.T) {
	a, tb, key := newAuth(t, 100)
	g := &gate{table: table{m: tb.m}, started: make(chan struct{}, 64), open: make(chan struct{})}
	a.lookup = g
	const n = 32
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			id, err := authn(a, key)
			if err == nil && id.KeyID != "k1" {
				err = errors.New("wrong identity " + id.KeyID)
			}
			errs <- err
		}()
	}
	<-g.started // the leader's lookup is in flight
	for {       // wait until every other caller has joined it
		a.flightMu.Lock()
		f := a.flights[Sum([]byte(key))]
		joined := f != nil && f.waiters == n-1
		a.flightMu.Unlock()
		if joined {
			break
		}
		if len(errs) > 0 {
			t.Fatal(<-errs)
		}
		time.Sleep(time.Millisecond)
	}
	// A caller after an invalidation does not join the older flight.
	a.Cache().Purge()
	late := make(chan error, 1)
	go func() { _, err := authn(a, key); late <- err }()
	<-g.started
	close(g.open)
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if err := <-late; err != nil {
		t.Fatal(err)
	}
	if c := g.calls.Load(); c != 2 {
		t.Fatalf("%d lookups for %d concurrent misses and one after an invalidation, want 2", c, n)
	}
}

// BenchmarkAuthenticateCached is the per-request key path: SHA-256 of the
// key, a cache hit, the expiry check. Run with -cpu 1,2 and
// -mutexprofile: one hot key (every request on one shard's lock) and many
// keys (spread over the shards).
func BenchmarkAuthenticateCached(b *testing.B) {
	for _, n := range []int{1, 1024} {
		b.Run(fmt.Sprintf("keys-%d", n), func(b *testing.B) {
			a, tb, _ := newAuth(b, 4096)
			keys := make([][]byte, n)
			for i := range keys {
				k := signedKey(b)
				tb.m[apikey.Hash(k)] = &wire.KeyResolution{KeyID: fmt.Sprint("k", i), VendorID: "v1", Environment: "sandbox",
					ExpiresAt: time.Now().Add(time.Hour), Vendor: wire.VendorInfo{Status: wire.VendorApproved}}
				keys[i] = []byte(k)
			}
			b.ReportAllocs()
			b.ResetTimer()
			var next atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				i := int(next.Add(1))
				for pb.Next() {
					k := keys[i%n]
					i++
					if _, err := a.Authenticate(k, nil, nil); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// A key's bucket names are built once per layout: the same layout answers
// the same names without building them again, a new layout (a reload that
// adds a policy) builds them anew.
func TestBucketsFollowTheLayout(t *testing.T) {
	id := &Identity{VendorID: "v1", KeyID: "k1"}
	rows := []policy.Policy{{Rate: policy.Rate{Name: "reads"}}, {Rate: policy.Rate{Name: "orders"}}}
	l1 := policy.NewLayout(rows, nil)
	b1 := id.Buckets(l1)
	if id.Buckets(l1) != b1 {
		t.Fatal("the same layout built the names again")
	}
	if l := policy.NewLayout(rows, l1); l != l1 {
		t.Fatal("a layout of the same rows is not the previous one")
	}
	l2 := policy.NewLayout(append(rows, policy.Policy{Rate: policy.Rate{Name: "report-downloads"}}), l1)
	if l2 == l1 {
		t.Fatal("a layout with another row is the previous one")
	}
	b2 := id.Buckets(l2)
	if b2 == b1 || b2.Name(2).Key != "vg:{v:v1}:report-downloads" || b2.Name(1).Key != "vg:{v:v1}:orders" {
		t.Fatalf("buckets after the layout changed: %+v %+v", b2.Name(1), b2.Name(2))
	}
	if n := testing.AllocsPerRun(100, func() { id.Buckets(l2) }); n != 0 {
		t.Fatalf("%v allocations per request once built", n)
	}
}

// TestCacheHoldsItsSize: a cache of size N holds N distinct keys, however
// they hash, and evicts only past N (the bound is the table's, not each
// shard's).
func TestCacheHoldsItsSize(t *testing.T) {
	const n = 10000
	c := testCache(t, CacheOptions{Size: n})
	sums := make([][32]byte, n)
	for i := range sums {
		sums[i] = Sum([]byte(fmt.Sprint("key-", i)))
		c.Put(tagOf(&sums[i]), &sums[i], &Identity{VendorID: fmt.Sprint("v", i)}, c.Generation())
	}
	if s := c.Stats(); s.Entries != n || s.Evictions != 0 {
		t.Fatalf("%d keys in a cache of %d: %+v", n, n, s)
	}
	for i := range sums {
		if _, found, _ := c.Get(tagOf(&sums[i])); !found {
			t.Fatalf("key %d evicted", i)
		}
	}
	extra := Sum([]byte("one more"))
	c.Put(tagOf(&extra), &extra, &Identity{VendorID: "v"}, c.Generation())
	if s := c.Stats(); s.Entries != n || s.Evictions != 1 {
		t.Fatalf("one key past the size: %+v", s)
	}
	if _, found, _ := c.Get(tagOf(&extra)); !found {
		t.Fatal("the key just stored was the one evicted")
	}
}

// clock is a settable time for the cache.
type clock struct{ ns atomic.Int64 }

func (c *clock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// TestPushedEntriesLiveLongUntilAGap: while pushes flow a working key lives
// PushedTTL, and is due for a refresh only in the last quarter of it; a gap
// shortens it to TTL from the last moment pushes were heard.
func TestPushedEntriesLiveLongUntilAGap(t *testing.T) {
	clk := &clock{}
	clk.ns.Store(time.Hour.Nanoseconds())
	c := testCache(t, CacheOptions{TTL: 30 * time.Second, PushedTTL: 10 * time.Minute, Now: clk.now})
	a, b := Sum([]byte("a")), Sum([]byte("b"))
	c.Put(tagOf(&a), &a, &Identity{VendorID: "v"}, c.Generation()) // no pushes yet: TTL
	c.PushesFlowing()
	c.Put(tagOf(&b), &b, &Identity{VendorID: "v"}, c.Generation())
	clk.advance(time.Minute)
	if _, found, _ := c.Get(tagOf(&a)); found {
		t.Fatal("a key stored before pushes flowed outlived TTL")
	}
	if _, found, refresh := c.Get(tagOf(&b)); !found || refresh {
		t.Fatalf("pushed key after a minute: found %v, refresh %v", found, refresh)
	}
	clk.advance(7*time.Minute + 30*time.Second) // 8.5 of 10 minutes
	if _, found, refresh := c.Get(tagOf(&b)); !found || !refresh {
		t.Fatalf("pushed key at 85%% of its life: found %v, refresh %v", found, refresh)
	}
	lastHeard := clk.now()
	clk.advance(2 * time.Second)
	c.PushesStopped(lastHeard)
	if _, found, _ := c.Get(tagOf(&b)); !found {
		t.Fatal("a gap dropped a key at once instead of keeping it TTL from the last push")
	}
	clk.advance(29 * time.Second)
	if _, found, _ := c.Get(tagOf(&b)); found {
		t.Fatal("a key outlived TTL after the pushes stopped")
	}
	// A lookup that started while pushes flowed is not stored after a gap.
	c.PushesFlowing()
	gen := c.Generation()
	c.PushesStopped(clk.now())
	c.Put(tagOf(&a), &a, &Identity{VendorID: "v"}, gen)
	if _, found, _ := c.Get(tagOf(&a)); found {
		t.Fatal("a lookup that raced a gap was cached")
	}
}

// TestShortEntriesRefreshFromHalfTheirLife: without pushes a working key
// is due for a refresh from at most half of TTL, so that a key requested
// every 15 s is refreshed before it expires; not before two fifths.
func TestShortEntriesRefreshFromHalfTheirLife(t *testing.T) {
	clk := &clock{}
	c := testCache(t, CacheOptions{TTL: 30 * time.Second, Now: clk.now})
	sums := make([][32]byte, 256)
	for i := range sums {
		sums[i] = Sum([]byte(fmt.Sprint("key-", i)))
		c.Put(tagOf(&sums[i]), &sums[i], &Identity{VendorID: "v"}, c.Generation())
	}
	clk.advance(11 * time.Second)
	for i := range sums {
		if _, _, refresh := c.Get(tagOf(&sums[i])); refresh {
			t.Fatalf("key %d due for a refresh at 11 s of 30", i)
		}
	}
	clk.advance(4 * time.Second)
	for i := range sums {
		if _, found, refresh := c.Get(tagOf(&sums[i])); !found || !refresh {
			t.Fatalf("key %d at 15 s of 30: found %v, refresh %v", i, found, refresh)
		}
	}
}

// TestScheduledRefreshRunsAFifthOfTTLBeforeExpiry: a short entry found due
// is refreshed a fifth of TTL before it expires, once (a second request
// schedules nothing more); a pushed entry with more than TTL left is
// refreshed at once; a gap that shortens a scheduled entry makes it due
// again by half TTL (its scheduled refresh would come too late).
func TestScheduledRefreshRunsAFifthOfTTLBeforeExpiry(t *testing.T) {
	clk := &clock{}
	clk.ns.Store(time.Hour.Nanoseconds())
	c := testCache(t, CacheOptions{TTL: 30 * time.Second, PushedTTL: 10 * time.Minute, Now: clk.now})
	a, b := Sum([]byte("a")), Sum([]byte("b"))
	c.Put(tagOf(&a), &a, &Identity{VendorID: "v"}, c.Generation())
	stored := clk.now().UnixNano()
	clk.advance(15 * time.Second)
	due, expires, sum, ok := c.Schedule(tagOf(&a))
	if !ok || expires != stored+int64(30*time.Second) || due != expires-int64(6*time.Second) {
		t.Fatalf("short entry: due %v before expiry, ok %v", time.Duration(expires-due), ok)
	}
	if sum != a {
		t.Fatal("the refresh would not look the key up by its SHA-256")
	}
	if _, _, refresh := c.Get(tagOf(&a)); refresh {
		t.Fatal("a scheduled entry is still due for a refresh")
	}
	if _, _, _, ok := c.Schedule(tagOf(&a)); ok {
		t.Fatal("an entry was scheduled twice")
	}
	if _, ok := c.Scheduled(tagOf(&a), expires); !ok {
		t.Fatal("the scheduled entry is not found as scheduled")
	}

	c.PushesFlowing()
	c.Put(tagOf(&b), &b, &Identity{VendorID: "v"}, c.Generation())
	clk.advance(9 * time.Minute)
	now := clk.now().UnixNano()
	if due, _, _, ok := c.Schedule(tagOf(&b)); !ok || due != now {
		t.Fatalf("pushed entry with a minute left: due in %v, ok %v", time.Duration(due-now), ok)
	}
	c.PushesStopped(clk.now())
	clk.advance(15 * time.Second)
	if _, found, refresh := c.Get(tagOf(&b)); !found || !refresh {
		t.Fatalf("half TTL after a gap, the shortened entry: found %v, refresh %v (want due again)", found, refresh)
	}
}

// TestSubscribingDropsWorkingKeys: when pushes flow again (a subscription
// made or remade), the working keys cached before are dropped, since an
// announcement made before it was not heard; unknown and revoked keys are
// kept, and a lookup that started before is not stored.
func TestSubscribingDropsWorkingKeys(t *testing.T) {
	clk := &clock{}
	clk.ns.Store(time.Hour.Nanoseconds())
	c := testCache(t, CacheOptions{TTL: 30 * time.Second, PushedTTL: 10 * time.Minute, Now: clk.now})
	a, b, unknown, revoked := Sum([]byte("a")), Sum([]byte("b")), Sum([]byte("u")), Sum([]byte("r"))
	c.Put(tagOf(&a), &a, &Identity{VendorID: "v"}, c.Generation())
	c.Put(tagOf(&b), &b, &Identity{VendorID: "w"}, c.Generation())
	c.Put(tagOf(&unknown), &unknown, nil, c.Generation())
	c.Put(tagOf(&revoked), &revoked, &Identity{VendorID: "v", Revoked: true}, c.Generation())
	racing := c.Generation()
	if n := c.PushesFlowing(); n != 2 {
		t.Fatalf("PushesFlowing dropped %d keys, want the 2 working ones", n)
	}
	for _, s := range [][32]byte{a, b} {
		if _, found, _ := c.Get(tagOf(&s)); found {
			t.Fatal("a working key cached before the subscription survived it")
		}
	}
	if _, found, _ := c.Get(tagOf(&unknown)); !found {
		t.Fatal("the unknown key's entry was dropped")
	}
	if id, found, _ := c.Get(tagOf(&revoked)); !found || !id.Revoked {
		t.Fatal("the revoked key's entry was dropped")
	}
	c.Put(tagOf(&a), &a, &Identity{VendorID: "v"}, racing)
	if _, found, _ := c.Get(tagOf(&a)); found {
		t.Fatal("a lookup that started before the subscription was cached")
	}
	if s := c.Stats(); s.Entries != 0 || s.NegativeEntries != 2 || s.Invalidations != 2 {
		t.Fatalf("stats after the subscription: %+v", s)
	}
	// The subscription broken and made again: the keys cached meanwhile go too.
	c.PushesStopped(clk.now())
	c.Put(tagOf(&a), &a, &Identity{VendorID: "v"}, c.Generation())
	c.Put(tagOf(&b), &b, &Identity{VendorID: "w"}, c.Generation())
	if n := c.PushesFlowing(); n != 2 {
		t.Fatalf("subscribing again dropped %d keys, want 2", n)
	}
}

// tagOf is a tag for a cache test's entry of sum: its first 16 bytes (the
// tests' sums differ there).
func tagOf(sum *[32]byte) *[16]byte {
	t := [16]byte(sum[:16])
	return &t
}

// TestCachedKeyOfAnotherEnvironmentIsRefused: a key whose record names
// another environment than its prefix is refused as unknown on its lookup
// and on every cache hit after it (a hit is not parsed again: its prefix
// is still checked against its record), with no second lookup.
func TestCachedKeyOfAnotherEnvironmentIsRefused(t *testing.T) {
	a, tb, key := newAuth(t, 100)
	tb.m[apikey.Hash(key)].Environment = apikey.Live // the key's prefix is the sandbox's
	for i := range 3 {
		if id, err := authn(a, key); !errors.Is(err, ErrUnknownKey) || id != nil {
			t.Fatalf("request %d: %v %+v, want %v", i, err, id, ErrUnknownKey)
		}
	}
	if tb.calls.Load() != 1 || a.Cache().Stats().Hits != 2 {
		t.Fatalf("%d lookups, %+v: want one lookup, then hits", tb.calls.Load(), a.Cache().Stats())
	}
}

// TestCacheHitNeedsTheWholeKey: a cached key found again only by itself;
// the same key with one character changed, or a character more or fewer,
// is a miss (each refused by its MAC, looked up by no one), and the cached
// key is found by its tag alone after them.
func TestCacheHitNeedsTheWholeKey(t *testing.T) {
	a, tb, key := newAuth(t, 100)
	if _, err := authn(a, key); err != nil {
		t.Fatal(err)
	}
	last := key[len(key)-1]
	other := byte('A')
	if last == other {
		other = 'B'
	}
	for _, k := range []string{key[:len(key)-1] + string(other), key + "A", key[:len(key)-1]} {
		if tag, want := Tag([]byte(k)), Tag([]byte(key)); tag == want {
			t.Fatalf("%d-character key shares the cached key's tag", len(k))
		}
		if _, err := authn(a, k); !errors.Is(err, ErrBadSignature) && !errors.Is(err, ErrMalformed) {
			t.Fatalf("%d-character variant: %v, want a refusal before any lookup", len(k), err)
		}
	}
	if id, err := authn(a, key); err != nil || id.KeyID != "k1" {
		t.Fatalf("%v %+v", err, id)
	}
	if tb.calls.Load() != 1 || a.Cache().Stats().Hits != 1 {
		t.Fatalf("%d lookups, %+v", tb.calls.Load(), a.Cache().Stats())
	}
}

// TestInvalidationBySHA256FindsEveryTable: the backend names a revoked key
// by its SHA-256, which is not what the cache is keyed by: a working
// entry and a negative one are both found by it, and only that key's.
func TestInvalidationBySHA256FindsEveryTable(t *testing.T) {
	c := testCache(t, CacheOptions{})
	a, b, u := Sum([]byte("a")), Sum([]byte("b")), Sum([]byte("u"))
	c.Put(tagOf(&a), &a, &Identity{VendorID: "v"}, c.Generation())
	c.Put(tagOf(&b), &b, &Identity{VendorID: "v"}, c.Generation())
	c.Put(tagOf(&u), &u, nil, c.Generation())
	c.InvalidateKey(&a)
	c.InvalidateKey(&u)
	if _, found, _ := c.Get(tagOf(&a)); found {
		t.Fatal("the working entry survived its invalidation")
	}
	if _, found, _ := c.Get(tagOf(&u)); found {
		t.Fatal("the negative entry survived its invalidation")
	}
	if _, found, _ := c.Get(tagOf(&b)); !found {
		t.Fatal("another key's entry was dropped")
	}
	if s := c.Stats(); s.Invalidations != 2 || s.Entries != 1 || s.NegativeEntries != 0 {
		t.Fatalf("%+v", s)
	}
}

// TestExpiryAtTheEndsOfTime: a cached identity keeps its expiry and
// scheduled revocation in Unix nanoseconds; a record with no expiry (the
// zero time) is expired, one expiring past what nanoseconds hold (2262) is
// not, and a revocation scheduled in the past refuses the key as revoked.
func TestExpiryAtTheEndsOfTime(t *testing.T) {
	for _, c := range []struct {
		name     string
		expires  time.Time
		revokeAt *time.Time
		want     error
	}{
		{"zero expiry", time.Time{}, nil, ErrKeyExpired},
		{"year 3000", time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC), nil, nil},
		{"an hour ago", time.Now().Add(-time.Hour), nil, ErrKeyExpired},
		{"revoked a second ago", time.Now().Add(time.Hour), ptr(time.Now().Add(-time.Second)), ErrRevoked},
		{"revoked in a minute", time.Now().Add(time.Hour), ptr(time.Now().Add(time.Minute)), nil},
	} {
		a, tb, key := newAuth(t, 100)
		res := tb.m[apikey.Hash(key)]
		res.ExpiresAt, res.RevokeAt = c.expires, c.revokeAt
		for i := range 2 { // the lookup, then the cache
			if _, err := authn(a, key); !errors.Is(err, c.want) {
				t.Fatalf("%s, request %d: %v, want %v", c.name, i, err, c.want)
			}
		}
	}
	id := identityOf(&wire.KeyResolution{ExpiresAt: time.Unix(1700000000, 5)})
	if !id.ExpiresAt().Equal(time.Unix(1700000000, 5)) || !id.RevokeAt().IsZero() {
		t.Fatalf("expires %v, revoke at %v", id.ExpiresAt(), id.RevokeAt())
	}
}

func ptr[T any](v T) *T { return &v }
