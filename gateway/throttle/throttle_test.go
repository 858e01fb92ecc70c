package throttle

import (
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"vendorgate/config"
	"vendorgate/shared/testredis"
)

func TestThresholds(t *testing.T) {
	rs := testredis.Start(t)
	c := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer c.Close()
	now := time.Unix(1_800_000_000, 0)
	for name, mk := range map[string]func() *Throttle{
		"local": func() *Throttle { return testLocal(t, func() time.Time { return now }) },
		"redis": func() *Throttle { o := testRedisOptions(c); o.Timeout = time.Second; return testRedis(t, o) },
	} {
		t.Run(name, func(t *testing.T) {
			th := Thresholds{PerAddress: 5, PerKey: 2, Window: time.Minute}
			a, b := mk(), mk() // two replicas
			addr := netip.MustParseAddr("198.51.100." + map[string]string{"local": "1", "redis": "2"}[name])
			key := [32]byte{1, 2, 3, byte(len(name))}
			for i := 0; i < 2; i++ {
				if v := a.Fail(addr, &key, th); v.Fallback != "" || v.Over {
					t.Fatalf("failure %d over, or counted in process: %+v", i, v)
				}
			}
			v := a.Fail(addr, &key, th)
			if !v.Over || v.RetryAfter <= 0 || v.RetryAfter > time.Minute {
				t.Fatalf("third failure of one key: %+v", v)
			}
			if name == "redis" { // replicas share counts: the address has 3 failures
				for i := 0; i < 2; i++ {
					if v := b.Fail(addr, nil, th); v.Over {
						t.Fatalf("address over after %d", 4+i)
					}
				}
				if v := b.Fail(addr, nil, th); !v.Over {
					t.Fatal("address not over after 6 failures across replicas")
				}
			}
			other := netip.MustParseAddr("2001:db8::1")
			if v := a.Fail(other, nil, th); v.Over {
				t.Fatal("another address throttled")
			}
		})
	}
}

// TestRedisDefaultTimeoutCountsAndFails: with the settings' default
// timeout (a zero one is refused: TestNewRefusesZeros) the throttle counts
// on a healthy Redis and fails (instead of hanging) on a stopped one.
func TestRedisDefaultTimeoutCountsAndFails(t *testing.T) {
	rs := testredis.Start(t)
	c := redis.NewClient(&redis.Options{Addr: rs.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	defer c.Close()
	th := Thresholds{PerAddress: 5, PerKey: 2, Window: time.Minute}
	addr := netip.MustParseAddr("198.51.100.9")
	tr := testRedis(t, testRedisOptions(c))
	if v := tr.Fail(addr, nil, th); v.Fallback != "" {
		t.Fatalf("healthy redis, default Timeout: counted in process (%s)", v.Fallback)
	}
	rs.Pause()
	defer rs.Resume()
	done := make(chan Fallback, 1)
	go func() { done <- tr.Fail(addr, nil, th).Fallback }()
	select {
	case fb := <-done:
		if fb != FallbackError {
			t.Fatalf("a paused redis counted a failure (fallback %q)", fb)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Fail against a paused redis did not return within 10s")
	}
}

// TestLocalBounded: a flood of distinct addresses and keys keeps each
// in-process map at its cap, dropping the oldest windows first.
func TestLocalBounded(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tr := testLocal(t, func() time.Time { return now })
	limit := config.DefaultGateway().FailedKeys.MaxTracked // the default cap
	th := Thresholds{PerAddress: 1, PerKey: 1, Window: time.Hour}
	addr := func(i int) netip.Addr {
		return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
	}
	key := func(i int) *[32]byte { return &[32]byte{byte(i >> 16), byte(i >> 8), byte(i), 9} }
	n := limit + limit/2
	for i := range n {
		tr.Fail(addr(i), key(i), th)
		if i%256 == 0 {
			now = now.Add(time.Millisecond) // later failures start later windows
		}
	}
	if a, k := tracked(tr); a != limit || k != limit {
		t.Fatalf("after %d distinct addresses and keys: %d addresses and %d keys tracked, want %d each", n, a, k, limit)
	}
	// The newest windows stayed: a second failure is over the threshold.
	if v := tr.Fail(addr(n-1), key(n-1), th); !v.Over {
		t.Fatal("the newest address and key were dropped")
	}
	// The oldest were dropped: a second failure starts a new window.
	if v := tr.Fail(addr(0), key(0), th); v.Over {
		t.Fatal("the oldest address and key are still counted")
	}
	if a, k := tracked(tr); a > limit || k > limit {
		t.Fatalf("%d addresses and %d keys tracked, want at most %d each", a, k, limit)
	}
}

// TestLocalIPv6CountsPerSlash64: two addresses in one /64 share a count;
// another /64 does not.
func TestLocalIPv6CountsPerSlash64(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tr := testLocal(t, func() time.Time { return now })
	th := Thresholds{PerAddress: 1, PerKey: 10, Window: time.Minute}
	if v := tr.Fail(netip.MustParseAddr("2001:db8:1:2::1"), nil, th); v.Over {
		t.Fatal("first failure over")
	}
	if v := tr.Fail(netip.MustParseAddr("2001:db8:1:2:ffff::9"), nil, th); !v.Over {
		t.Fatal("a second address of the same /64 was counted apart")
	}
	if v := tr.Fail(netip.MustParseAddr("2001:db8:1:3::1"), nil, th); v.Over {
		t.Fatal("another /64 shares the count")
	}
	if a, _ := tracked(tr); a != 2 {
		t.Fatalf("%d addresses tracked, want 2 (/64s)", a)
	}
}

// TestLocalMaxTrackedAndEndedWindows: the cap is the configured one, and
// ended windows leave the maps.
func TestLocalMaxTrackedAndEndedWindows(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tr, err := NewLocal(LocalOptions{Now: func() time.Time { return now }, MaxTracked: 3})
	if err != nil {
		t.Fatal(err)
	}
	th := Thresholds{PerAddress: 5, PerKey: 5, Window: time.Minute}
	for i := range 5 {
		tr.Fail(netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}), &[32]byte{byte(i)}, th)
	}
	if a, k := tracked(tr); a != 3 || k != 3 {
		t.Fatalf("%d addresses and %d keys tracked, want 3 each", a, k)
	}
	now = now.Add(time.Minute)
	tr.Fail(netip.MustParseAddr("192.0.2.200"), nil, th)
	if a, _ := tracked(tr); a != 1 {
		t.Fatalf("%d addresses tracked after their windows ended, want 1", a)
	}
}

// TestOverAddressCostsNoRedisCall: once an address is over its threshold,
// its further failures are answered from memory until its window ends: a
// flood from it sends Redis nothing (Redis stopped, the answer is still
// 429), and the window's end brings counting back.
func TestOverAddressCostsNoRedisCall(t *testing.T) {
	rs := testredis.Start(t)
	c := redis.NewClient(&redis.Options{Addr: rs.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	defer c.Close()
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	o := testRedisOptions(c)
	o.Timeout, o.Now = time.Second, clock
	tr := testRedis(t, o)
	th := Thresholds{PerAddress: 3, PerKey: 100, Window: time.Minute}
	addr := netip.MustParseAddr("198.51.100.77")
	for i := 0; i < 4; i++ {
		if v := tr.Fail(addr, &[32]byte{byte(i)}, th); v.Fallback != "" {
			t.Fatalf("failure %d counted in process (%s), Redis running", i, v.Fallback)
		}
	}
	rs.Stop()
	for i := 0; i < 1000; i++ {
		v := tr.Fail(addr, &[32]byte{byte(i)}, th)
		if v.Fallback != "" || !v.Over || v.RetryAfter <= 0 {
			t.Fatalf("failure %d from an address over its threshold, Redis stopped: %+v", i, v)
		}
	}
	if v := tr.Fail(netip.MustParseAddr("198.51.100.78"), nil, th); v.Fallback != FallbackError {
		t.Fatalf("another address was not counted in process (Redis is stopped: it must fall back): %+v", v)
	}
	mu.Lock()
	now = now.Add(time.Minute + time.Second)
	mu.Unlock()
	if v := tr.Fail(addr, nil, th); v.Fallback != FallbackError {
		t.Fatalf("after the window the address is still answered from memory: %+v", v)
	}
}

// events records a Redis throttle's state changes and fallbacks.
type events struct {
	mu        sync.Mutex
	fallbacks map[Fallback]int
	degraded  []Fallback
	restored  []uint64 // failures counted in process, as each restore told
}

func (e *events) options(o RedisOptions) RedisOptions {
	e.fallbacks = map[Fallback]int{}
	o.OnFallback = func(f Fallback) { e.mu.Lock(); e.fallbacks[f]++; e.mu.Unlock() }
	o.OnDegraded = func(f Fallback, _ error) { e.mu.Lock(); e.degraded = append(e.degraded, f); e.mu.Unlock() }
	o.OnRestored = func(_ time.Duration, n uint64) { e.mu.Lock(); e.restored = append(e.restored, n); e.mu.Unlock() }
	return o
}

func (e *events) snapshot() (map[Fallback]int, []Fallback, []uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	f := map[Fallback]int{}
	for k, v := range e.fallbacks {
		f[k] = v
	}
	return f, append([]Fallback(nil), e.degraded...), append([]uint64(nil), e.restored...)
}

// TestShareExhaustedCountsInProcess: with the throttle's one connection
// held by a call Redis does not answer (paused), further failures are not
// queued for it: they are counted in process at once, answered under the
// threshold and over it past the threshold (401, then 429), and the state
// change is told once however many failures fall back. Once Redis has
// counted a whole hold after the last fallback, the return is told once,
// with the failures counted in process meanwhile.
func TestShareExhaustedCountsInProcess(t *testing.T) {
	rs := testredis.Start(t)
	c := redis.NewClient(&redis.Options{Addr: rs.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true, PoolSize: 1})
	defer c.Close()
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	var ev events
	o := testRedisOptions(c)
	o.Timeout, o.Conns, o.Hold, o.Now = 10*time.Second, 1, time.Minute, clock
	tr := testRedis(t, ev.options(o))
	th := Thresholds{PerAddress: 5, PerKey: 100, Window: time.Hour}
	if v := tr.Fail(netip.MustParseAddr("198.51.100.1"), nil, th); v.Fallback != "" {
		t.Fatalf("healthy redis: counted in process (%s)", v.Fallback)
	}

	rs.Pause()
	held := make(chan Verdict, 1)
	go func() { held <- tr.Fail(netip.MustParseAddr("198.51.100.2"), nil, th) }()
	sc := tr.c.(*sharedCounter)
	for len(sc.slots) == 0 { // the call is under way: it holds the one connection
		time.Sleep(time.Millisecond)
	}
	addr := netip.MustParseAddr("198.51.100.3")
	for i := 0; i < th.PerAddress; i++ {
		if v := tr.Fail(addr, nil, th); v.Over || v.Fallback != FallbackBusy {
			t.Fatalf("failure %d with the share in use: %+v, want counted in process (busy), under the threshold", i+1, v)
		}
	}
	v := tr.Fail(addr, nil, th)
	if !v.Over || v.RetryAfter <= 0 || v.Fallback != FallbackBusy {
		t.Fatalf("failure %d with the share in use: %+v, want over the threshold (429), counted in process", th.PerAddress+1, v)
	}
	rs.Resume()
	if v := <-held; v.Fallback != "" {
		t.Fatalf("the call that held the connection: %+v, want counted in Redis once Redis resumed", v)
	}
	fb, deg, res := ev.snapshot()
	if fb[FallbackBusy] != th.PerAddress+1 || len(fb) != 1 || len(deg) != 1 || deg[0] != FallbackBusy || len(res) != 0 {
		t.Fatalf("fallbacks %v, degraded %v, restored %v; want %d busy, degraded once (busy), not restored", fb, deg, res, th.PerAddress+1)
	}

	// Within the hold, failures are counted in process without asking Redis.
	if v := tr.Fail(netip.MustParseAddr("198.51.100.4"), nil, th); v.Fallback != FallbackBusy {
		t.Fatalf("within the hold: %+v, want counted in process", v)
	}
	mu.Lock()
	now = now.Add(time.Minute + time.Second) // the hold is over: Redis again, not yet restored
	mu.Unlock()
	if v := tr.Fail(netip.MustParseAddr("198.51.100.5"), nil, th); v.Fallback != "" {
		t.Fatalf("after the hold: %+v, want counted in Redis", v)
	}
	if _, _, res := ev.snapshot(); len(res) != 0 {
		t.Fatalf("restored %v right after the hold; want a whole hold of Redis first", res)
	}
	mu.Lock()
	now = now.Add(time.Minute)
	mu.Unlock()
	for i := 0; i < 3; i++ {
		if v := tr.Fail(netip.MustParseAddr("198.51.100.6"), nil, th); v.Fallback != "" {
			t.Fatalf("a hold after the hold: %+v, want counted in Redis", v)
		}
	}
	fb, deg, res = ev.snapshot()
	if len(deg) != 1 || len(res) != 1 || res[0] != uint64(th.PerAddress+2) {
		t.Fatalf("degraded %v, restored %v (fallbacks %v); want each told once, the restore counting %d", deg, res, fb, th.PerAddress+2)
	}
}

// TestRedisDownCountsInProcess: Redis stopped (the call fails) or known
// down (the limiter's breaker open: no call at all), failures are counted
// in process, 401 then 429 past the per-address and per-key thresholds,
// and the state change is told once.
func TestRedisDownCountsInProcess(t *testing.T) {
	for _, how := range []string{"stopped", "known down"} {
		t.Run(how, func(t *testing.T) {
			rs := testredis.Start(t)
			c := redis.NewClient(&redis.Options{Addr: rs.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
			defer c.Close()
			var ev events
			o := testRedisOptions(c)
			o.Timeout, o.Hold = time.Second, 50*time.Millisecond
			want := FallbackError
			if how == "known down" {
				o.Down = func() bool { return true }
				want = FallbackDown
			}
			tr := testRedis(t, ev.options(o))
			rs.Stop()
			th := Thresholds{PerAddress: 4, PerKey: 2, Window: time.Hour}
			addr := netip.MustParseAddr("2001:db8:5::1")
			var n int
			for i := 0; i < th.PerAddress; i++ {
				v := tr.Fail(addr, nil, th)
				n++
				if v.Over || v.Fallback == "" {
					t.Fatalf("failure %d, Redis %s: %+v, want counted in process, under the threshold", i+1, how, v)
				}
				time.Sleep(20 * time.Millisecond) // some fall in a hold, some after it
			}
			if v := tr.Fail(addr, nil, th); !v.Over || v.RetryAfter <= 0 {
				t.Fatalf("address past its threshold, Redis %s: %+v, want over", how, v)
			}
			n++
			key := &[32]byte{7}
			other := netip.MustParseAddr("192.0.2.77")
			for i := 0; i < th.PerKey; i++ {
				if v := tr.Fail(other, key, th); v.Over {
					t.Fatalf("key failure %d, Redis %s: over", i+1, how)
				}
				n++
			}
			if v := tr.Fail(other, key, th); !v.Over {
				t.Fatalf("key past its threshold, Redis %s: not over", how)
			}
			n++
			fb, deg, res := ev.snapshot()
			if fb[want] != n || len(deg) != 1 || deg[0] != want || len(res) != 0 {
				t.Fatalf("fallbacks %v, degraded %v, restored %v; want %d %s, degraded once", fb, deg, res, n, want)
			}
		})
	}
}
