package gateway

import (
	"sync/atomic"
	"testing"
	"time"

	"vendorgate/config"
	"vendorgate/shared/testredis"
	"vendorgate/shared/wire"
)

// testClock is a settable clock for the gateway (Options.Now), starting at
// the wall clock's now.
type testClock struct{ ns atomic.Int64 }

func newTestClock() *testClock {
	c := &testClock{}
	c.ns.Store(time.Now().UnixNano())
	return c
}

func (c *testClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *testClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// startPushed starts a backend, Redis and a gateway on clk whose
// invalidation subscription is up, and adds an approved key.
func startPushed(t *testing.T, clk *testClock) (*testBackend, *testredis.Server, *testGateway, string) {
	rs := testredis.Start(t)
	b := newTestBackend(t)
	gw := startGateway(t, b, func(o *Options) {
		o.Config.Redis.URL = config.List{rs.URL()}
		o.Config.Limits.Vendor.Reads = config.Limit{Rate: 1000, Period: time.Minute}
		o.Config.KeyCache.PushedTTL = 15 * time.Minute
		o.Now = clk.now
	})
	waitPushed(t, gw, true)
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(24*time.Hour))
	return b, rs, gw, key
}

// waitPushed waits until the gateway's key cache says invalidations reach
// it (or not).
func waitPushed(t *testing.T, gw *testGateway, pushed bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for gw.g.auth.Cache().Pushed() != pushed {
		if time.Now().After(deadline) {
			t.Fatalf("key cache pushed never became %v", pushed)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func wantOK(t *testing.T, url, key string) {
	t.Helper()
	if a := do(t, "GET", url, key); a.status != 200 {
		t.Fatalf("%d %s", a.status, a.body)
	}
}

// TestPushedKeyIsRefreshedOffTheRequestPath: with invalidations pushed, a
// key is cached past key_cache.ttl, refreshed by one background lookup
// before pushed_ttl runs out while requests keep being answered (the
// backend holds the lookup: no request waits for it), and a pushed
// revocation still refuses it at once.
func TestPushedKeyIsRefreshedOffTheRequestPath(t *testing.T) {
	clk := newTestClock()
	b, rs, gw, key := startPushed(t, clk)
	me := gw.url + "/api/vendor/v1/me"
	wantOK(t, me, key)
	clk.advance(5 * time.Minute) // ten times key_cache.ttl
	wantOK(t, me, key)
	if n := b.lookups.Load(); n != 1 {
		t.Fatalf("%d lookups within pushed_ttl, want 1", n)
	}

	hold := make(chan struct{})
	b.hold.Store(&hold)
	clk.advance(9 * time.Minute) // 14 of 15 minutes: past the refresh point
	for range 5 {
		wantOK(t, me, key) // answered from the cache while the refresh is held
	}
	deadline := time.Now().Add(5 * time.Second)
	for b.lookups.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := b.lookups.Load(); n != 2 {
		t.Fatalf("%d lookups, want the first and one refresh", n)
	}
	b.hold.Store(nil)
	close(hold)
	cache := gw.g.auth.Cache()
	for cache.Stats().Refreshes != 1 || gw.g.auth.RefreshesInFlight() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("refresh did not finish: %+v", cache.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	clk.advance(5 * time.Minute) // past the first entry's expiry: the refreshed one answers
	wantOK(t, me, key)
	if s := cache.Stats(); b.lookups.Load() != 2 || s.Misses != 1 || s.Refreshes != 1 {
		t.Fatalf("%d lookups, %+v: want one miss (the first request) and one refresh", b.lookups.Load(), s)
	}

	b.update(key, func(r *wire.KeyResolution) { ts := time.Now(); r.RevokedAt = &ts })
	rs.Do(t, "PUBLISH", wire.InvalidationChannel, `{"key_hash":"`+hashOf(key)+`"}`)
	waitStatus(t, me, key, 401)
}

// TestSubscriptionGapShortensCachedKeys: a subscription silent past its
// heartbeat (Redis paused) means invalidations may have been missed: a key
// cached for pushed_ttl is kept only key_cache.ttl from the last moment the
// subscription answered, even once it answers again.
func TestSubscriptionGapShortensCachedKeys(t *testing.T) {
	clk := newTestClock()
	b, rs, gw, key := startPushed(t, clk)
	me := gw.url + "/api/vendor/v1/me"
	wantOK(t, me, key)
	clk.advance(2 * time.Minute)
	wantOK(t, me, key)
	time.Sleep(1500 * time.Millisecond) // a heartbeat answers at the clock's new time
	rs.Pause()
	waitPushed(t, gw, false)
	rs.Resume()
	waitPushed(t, gw, true)
	wantOK(t, me, key) // within key_cache.ttl of the gap's start
	if n := b.lookups.Load(); n != 1 {
		t.Fatalf("%d lookups before key_cache.ttl passed, want 1", n)
	}
	clk.advance(31 * time.Second)
	wantOK(t, me, key)
	if n := b.lookups.Load(); n != 2 {
		t.Fatalf("%d lookups: the gap did not shorten the cached key", n)
	}
}
