package throttle

import (
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"vendorgate/shared/testredis"
)

func TestThresholds(t *testing.T) {
	rs := testredis.Start(t)
	c := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer c.Close()
	now := time.Unix(1_800_000_000, 0)
	for name, mk := range map[string]func() *Throttle{
		"local": func() *Throttle { return NewLocal(LocalOptions{Now: func() time.Time { return now }}) },
		"redis": func() *Throttle { return NewRedis(RedisOptions{Client: c, Timeout: time.Second}) },
	} {
		t.Run(name, func(t *testing.T) {
			th := Thresholds{PerAddress: 5, PerKey: 2, Window: time.Minute}
			a, b := mk(), mk() // two replicas
			addr := netip.MustParseAddr("198.51.100." + map[string]string{"local": "1", "redis": "2"}[name])
			key := [32]byte{1, 2, 3, byte(len(name))}
			for i := 0; i < 2; i++ {
				if v, err := a.Fail(addr, &key, th); err != nil || v.Over {
					t.Fatalf("failure %d over: %+v %v", i, v, err)
				}
			}
			v, _ := a.Fail(addr, &key, th)
			if !v.Over || v.RetryAfter <= 0 || v.RetryAfter > time.Minute {
				t.Fatalf("third failure of one key: %+v", v)
			}
			if name == "redis" { // replicas share counts: the address has 3 failures
				for i := 0; i < 2; i++ {
					if v, _ := b.Fail(addr, nil, th); v.Over {
						t.Fatalf("address over after %d", 4+i)
					}
				}
				if v, _ := b.Fail(addr, nil, th); !v.Over {
					t.Fatal("address not over after 6 failures across replicas")
				}
			}
			other := netip.MustParseAddr("2001:db8::1")
			if v, _ := a.Fail(other, nil, th); v.Over {
				t.Fatal("another address throttled")
			}
		})
	}
}

// TestRedisZeroTimeoutTakesTheDefault: options that leave Timeout unset get
// the documented default, so the throttle counts on a healthy Redis and
// fails (instead of hanging) on a stopped one.
func TestRedisZeroTimeoutTakesTheDefault(t *testing.T) {
	rs := testredis.Start(t)
	c := redis.NewClient(&redis.Options{Addr: rs.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	defer c.Close()
	th := Thresholds{PerAddress: 5, PerKey: 2, Window: time.Minute}
	addr := netip.MustParseAddr("198.51.100.9")
	tr := NewRedis(RedisOptions{Client: c})
	if _, err := tr.Fail(addr, nil, th); err != nil {
		t.Fatalf("healthy redis, zero Timeout: %v", err)
	}
	rs.Pause()
	defer rs.Resume()
	done := make(chan error, 1)
	go func() {
		_, err := tr.Fail(addr, nil, th)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a paused redis counted a failure")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Fail against a paused redis did not return within 10s")
	}
}

// TestLocalBounded: a flood of distinct addresses and keys keeps each
// in-process map at its cap, dropping the oldest windows first.
func TestLocalBounded(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tr := NewLocal(LocalOptions{Now: func() time.Time { return now }})
	const limit = 100_000 // the default cap
	th := Thresholds{PerAddress: 1, PerKey: 1, Window: time.Hour}
	addr := func(i int) netip.Addr {
		return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
	}
	key := func(i int) *[32]byte { return &[32]byte{byte(i >> 16), byte(i >> 8), byte(i), 9} }
	const n = limit + limit/2
	for i := range n {
		if _, err := tr.Fail(addr(i), key(i), th); err != nil {
			t.Fatal(err)
		}
		if i%256 == 0 {
			now = now.Add(time.Millisecond) // later failures start later windows
		}
	}
	if a, k := tracked(tr); a != limit || k != limit {
		t.Fatalf("after %d distinct addresses and keys: %d addresses and %d keys tracked, want %d each", n, a, k, limit)
	}
	// The newest windows stayed: a second failure is over the threshold.
	if v, _ := tr.Fail(addr(n-1), key(n-1), th); !v.Over {
		t.Fatal("the newest address and key were dropped")
	}
	// The oldest were dropped: a second failure starts a new window.
	if v, _ := tr.Fail(addr(0), key(0), th); v.Over {
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
	tr := NewLocal(LocalOptions{Now: func() time.Time { return now }})
	th := Thresholds{PerAddress: 1, PerKey: 10, Window: time.Minute}
	if v, _ := tr.Fail(netip.MustParseAddr("2001:db8:1:2::1"), nil, th); v.Over {
		t.Fatal("first failure over")
	}
	if v, _ := tr.Fail(netip.MustParseAddr("2001:db8:1:2:ffff::9"), nil, th); !v.Over {
		t.Fatal("a second address of the same /64 was counted apart")
	}
	if v, _ := tr.Fail(netip.MustParseAddr("2001:db8:1:3::1"), nil, th); v.Over {
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
	tr := NewLocal(LocalOptions{Now: func() time.Time { return now }, MaxTracked: 3})
	th := Thresholds{PerAddress: 5, PerKey: 5, Window: time.Minute}
	for i := range 5 {
		if _, err := tr.Fail(netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}), &[32]byte{byte(i)}, th); err != nil {
			t.Fatal(err)
		}
	}
	if a, k := tracked(tr); a != 3 || k != 3 {
		t.Fatalf("%d addresses and %d keys tracked, want 3 each", a, k)
	}
	now = now.Add(time.Minute)
	if _, err := tr.Fail(netip.MustParseAddr("192.0.2.200"), nil, th); err != nil {
		t.Fatal(err)
	}
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
	tr := NewRedis(RedisOptions{Client: c, Timeout: time.Second, Now: clock})
	th := Thresholds{PerAddress: 3, PerKey: 100, Window: time.Minute}
	addr := netip.MustParseAddr("198.51.100.77")
	for i := 0; i < 4; i++ {
		if _, err := tr.Fail(addr, &[32]byte{byte(i)}, th); err != nil {
			t.Fatal(err)
		}
	}
	rs.Stop()
	for i := 0; i < 1000; i++ {
		v, err := tr.Fail(addr, &[32]byte{byte(i)}, th)
		if err != nil || !v.Over || v.RetryAfter <= 0 {
			t.Fatalf("failure %d from an address over its threshold, Redis stopped: %+v %v", i, v, err)
		}
	}
	if _, err := tr.Fail(netip.MustParseAddr("198.51.100.78"), nil, th); err == nil {
		t.Fatal("another address was not counted (Redis is stopped: it must fail)")
	}
	mu.Lock()
	now = now.Add(time.Minute + time.Second)
	mu.Unlock()
	if _, err := tr.Fail(addr, nil, th); err == nil {
		t.Fatal("after the window the address is still answered from memory")
	}
}
