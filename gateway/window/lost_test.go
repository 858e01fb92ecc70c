package window

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"vendorgate/gateway/policy"
	"vendorgate/shared/testredis"
)

// markerChecked waits until l has made n marker checks (they run off the
// request's path, after the charge that asked for them).
func markerChecked(t *testing.T, l *Redis, n uint64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for l.markerChecks.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d marker checks, want %d", l.markerChecks.Load(), n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// A quota counter absent from Redis is a window's first use or a counter
// Redis lost (a flush, a restart without persistence, a failover). The
// marker Redis keeps with no TTL tells them apart: a new window, the
// marker in place, is not counted; FLUSHALL mid-window is, once, by each
// gateway that was running across it, and the counter starts again from
// the charge that found it gone.
func TestQuotaCounterLostIsCounted(t *testing.T) {
	rs := testredis.Start(t)
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	var lost [2]atomic.Int64
	var gws [2]*Redis
	for i := range gws {
		c := redis.NewClient(&redis.Options{Addr: rs.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		l, err := NewRedis(RedisOptions{Client: c, Conn: transport(t, c, 2*time.Second), Timeout: 2 * time.Second, OnDataLost: func() { lost[i].Add(1) }})
		if err != nil {
			t.Fatal(err)
		}
		l.now = func() int64 { return now.UnixMilli() }
		gws[i] = l
	}
	q := checks(policy.Check{Key: "vg:{v:v1}:orders", Rate: quota("orders-month", 100, policy.Calendar{Month: true})})
	charge := func(l *Redis, want int) {
		t.Helper()
		d, err := l.Charge(q)
		if err != nil || !d.Allowed || d.Results[0].Used != want {
			t.Fatalf("charge: %v, allowed %v, used %d; want used %d", err, d.Allowed, d.Results[0].Used, want)
		}
	}
	// First contact: each gateway reads (or writes) the marker.
	charge(gws[0], 1)
	markerChecked(t, gws[0], 1)
	charge(gws[1], 2)
	markerChecked(t, gws[1], 1)
	if v := rs.Do(t, "TTL", MarkerKey); v != "-1" && v != ":-1" {
		t.Fatalf("the marker's TTL is %s, want none (-1)", v)
	}
	for i := 0; i < 5; i++ {
		charge(gws[i%2], 3+i)
	}
	// The next month: its counter is absent, its first use; not a loss.
	now = time.Date(2026, 4, 1, 0, 0, 1, 0, time.UTC)
	checks0 := gws[0].markerChecks.Load()
	charge(gws[0], 1)
	markerChecked(t, gws[0], checks0+1)
	charge(gws[1], 2)
	if lost[0].Load()+lost[1].Load() != 0 {
		t.Fatalf("a window's first use counted as lost data (%d, %d)", lost[0].Load(), lost[1].Load())
	}
	// Mid-window, Redis loses everything. Each gateway checks the marker
	// when it finds a quota counter gone: the first on v1's, the second on
	// v2's (v1's it finds charged again by the first).
	q2 := checks(policy.Check{Key: "vg:{v:v2}:orders", Rate: quota("orders-month", 100, policy.Calendar{Month: true})})
	checks1 := gws[1].markerChecks.Load()
	if d, err := gws[1].Charge(q2); err != nil || d.Results[0].Used != 1 {
		t.Fatalf("v2's first charge: %v, %+v", err, d.Results[0])
	}
	markerChecked(t, gws[1], checks1+1)
	rs.Do(t, "FLUSHALL")
	now = now.Add(10 * 24 * time.Hour)
	checks0, checks1 = gws[0].markerChecks.Load(), gws[1].markerChecks.Load()
	charge(gws[0], 1)
	markerChecked(t, gws[0], checks0+1)
	charge(gws[1], 2)
	if d, err := gws[1].Charge(q2); err != nil || d.Results[0].Used != 1 {
		t.Fatalf("v2 after the flush: %v, %+v", err, d.Results[0])
	}
	markerChecked(t, gws[1], checks1+1)
	if lost[0].Load() != 1 || lost[1].Load() != 1 {
		t.Fatalf("FLUSHALL mid-window counted (%d, %d) times by the two gateways, want once each", lost[0].Load(), lost[1].Load())
	}
	// Counted once: the next counter found gone (v3's first use) is not a
	// loss again.
	checks0 = gws[0].markerChecks.Load()
	q3 := checks(policy.Check{Key: "vg:{v:v3}:orders", Rate: quota("orders-month", 100, policy.Calendar{Month: true})})
	if _, err := gws[0].Charge(q3); err != nil {
		t.Fatal(err)
	}
	markerChecked(t, gws[0], checks0+1)
	if lost[0].Load() != 1 || lost[1].Load() != 1 {
		t.Fatalf("one loss counted (%d, %d) times, want once each", lost[0].Load(), lost[1].Load())
	}
}
