package throttle

import (
	"net/netip"
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
		"local": func() *Throttle { return NewLocal(func() time.Time { return now }) },
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
