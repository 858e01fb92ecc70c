package gateway

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"vendorgate/config"
	"vendorgate/gateway/auth"
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
// heartbeat (Redis paused) means invalidations may have been missed: while
// the gap lasts, a key cached for pushed_ttl is kept only key_cache.ttl from
// the last moment the subscription answered; once it answers again, the
// keys cached before are dropped and looked up at their next request (an
// invalidation missed in the gap is never heard).
func TestSubscriptionGapShortensCachedKeys(t *testing.T) {
	clk := newTestClock()
	b, rs, gw, key := startPushed(t, clk)
	me := gw.url + "/api/vendor/v1/me"
	tag := auth.Tag([]byte(key))
	cached := func() bool {
		_, found, _ := gw.g.auth.Cache().Get(&tag)
		return found
	}
	wantOK(t, me, key)
	clk.advance(2 * time.Minute)
	wantOK(t, me, key)
	time.Sleep(1500 * time.Millisecond) // a heartbeat answers at the clock's new time
	rs.Pause()
	waitPushed(t, gw, false)
	if !cached() {
		t.Fatal("the gap dropped the cached key at once instead of keeping it key_cache.ttl")
	}
	clk.advance(31 * time.Second)
	if cached() {
		t.Fatal("the gap did not shorten the cached key to key_cache.ttl")
	}
	rs.Resume()
	waitPushed(t, gw, true)
	wantOK(t, me, key)
	if n := b.lookups.Load(); n != 2 {
		t.Fatalf("%d lookups, want 2: the key expired in the gap", n)
	}

	// A gap shorter than key_cache.ttl: the key cached before it is not
	// served again once the subscription answers.
	rs.Pause()
	waitPushed(t, gw, false)
	rs.Resume()
	waitPushed(t, gw, true)
	if cached() {
		t.Fatal("the key cached before a gap is still cached after the subscription answered again")
	}
	wantOK(t, me, key)
	if n := b.lookups.Load(); n != 3 {
		t.Fatalf("%d lookups, want 3: the key looked up again after the gap", n)
	}
}

// TestKeysRequestedEveryHalfTTLNeverWait: without pushes, many keys, each
// requested a little more often than once per half of key_cache.ttl, with a
// slow key lookup: after the first pass no request waits on a lookup (every
// key is refreshed in the background before it expires), and the backend
// is asked about each key about once per TTL, not once per request.
func TestKeysRequestedEveryHalfTTLNeverWait(t *testing.T) {
	const (
		keys     = 300
		ttl      = 4 * time.Second
		interval = 1800 * time.Millisecond // each key's, just under half the TTL
		rounds   = 6                       // the first one caches every key, unpaced
		workers  = 16
	)
	b := newTestBackend(t)
	b.lookupDelay.Store(int64(150 * time.Millisecond))
	gw := startGateway(t, b, func(o *Options) {
		o.Config.KeyCache.TTL = ttl
		o.Config.Limits.Vendor.Reads = config.Limit{Rate: 1000, Period: time.Minute}
	})
	list := make([]string, keys)
	for i := range list {
		list[i], _ = b.addKey(fmt.Sprintf("vendor-%d", i), wire.VendorApproved, time.Now().Add(time.Hour))
	}
	// At most workers connections, kept: new connections from one peer
	// are rate limited (max_new_conns_per_peer).
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workers, MaxConnsPerHost: workers}}
	me := gw.url + "/api/vendor/v1/me"
	cache := gw.g.auth.Cache()
	var afterFirst auth.Stats
	var lookupsAfterFirst int64
	start := time.Now()
	var failed atomic.Int64
	// The promise holds for a key requested at least once per half TTL
	// as the gateway sees it. Each paced request is sent by a goroutine of
	// its own at its time, so that an answer that waited does not delay
	// the next requests; a client whose timers run late on a loaded
	// machine still breaks that premise itself: a request is off it when
	// it was sent more than TTL/2 after its key's previous one. Round 1's
	// requests follow the unpaced fill, whose spacing the test does not
	// set: the waits are judged from round 2 on.
	sent := make([]time.Time, keys)
	var offPremise atomic.Int64
	var afterWarm auth.Stats
	send := func(r, i int) {
		req, _ := http.NewRequest("GET", me, nil)
		req.Header.Set(wire.HeaderAPIKey, list[i])
		at := time.Now()
		if r >= 2 && at.Sub(sent[i]) > ttl/2 {
			offPremise.Add(1)
		}
		sent[i] = at
		resp, err := client.Do(req)
		if err != nil {
			if failed.Add(1) == 1 {
				t.Logf("request failed: %v", err)
			}
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			if failed.Add(1) == 1 {
				t.Logf("request answered %d", resp.StatusCode)
			}
		}
	}
	for r := range rounds {
		var wg sync.WaitGroup
		if r == 0 { // the fill, unpaced
			for w := range workers {
				wg.Go(func() {
					for i := w; i < keys; i += workers {
						send(r, i)
					}
				})
			}
		} else {
			for i := range keys {
				wg.Go(func() {
					time.Sleep(time.Until(start.Add(time.Duration(r-1)*interval + time.Duration(i)*interval/keys)))
					send(r, i)
				})
			}
		}
		wg.Wait()
		if r == 1 {
			afterWarm = cache.Stats()
		}
		if r == 0 {
			afterFirst, lookupsAfterFirst = cache.Stats(), b.lookups.Load()
			start = time.Now()
		} else if late := time.Since(start) - time.Duration(r)*interval; late > interval/4 {
			t.Logf("round %d ended %v late: the client could not keep the pace", r, late)
		}
	}
	s := cache.Stats()
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d requests failed", n)
	}
	waited, lookups := s.Misses-afterWarm.Misses, b.lookups.Load()-lookupsAfterFirst
	elapsed := time.Duration(rounds-1) * interval
	off := uint64(offPremise.Load())
	t.Logf("from round 2: %d of %d requests waited, %d of them came more than TTL/2 after their key's previous one; after the first pass: %d lookups (%d refreshes) in %v",
		waited, keys*(rounds-2), off, lookups, s.Refreshes-afterFirst.Refreshes, elapsed)
	// A request off the premise may find its key expired and wait; no
	// other request may.
	if waited > off {
		t.Errorf("%d requests waited on a key lookup from round 2, want at most %d (those that came more than TTL/2 after their key's previous one)", waited, off)
	}
	// Once per TTL per key would be keys × elapsed / ttl; once per request
	// keys × (rounds − 1).
	if most := int64(keys * float64(elapsed) / float64(ttl) * 1.5); lookups > most {
		t.Errorf("%d lookups, want at most %d (about one per key per TTL)", lookups, most)
	}
}
