package limit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"vendorgate/gateway/policy"
	"vendorgate/shared/testredis"
)

// leased is a pipelined limiter with leases on rs, as a gateway replica
// builds it, on a test clock (testClock) whose kick each of its hooks
// kicks; charged counts the buckets its calls charged in Redis.
type leased struct {
	*Redis
	client           *redis.Client
	clock            testClock
	charged, granted atomic.Int64
	spent, refunded  atomic.Int64
	dropped          atomic.Int64
	failures         atomic.Int64 // failed round trips to Redis (heartbeats among them)
}

// admit sends n reads of key under r, each of which must be admitted.
func (l *leased) admit(t *testing.T, key string, r policy.Rate, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if d, err := l.Allow(one(key, r)); err != nil || !d.Allowed {
			t.Fatalf("read %d of %d: %+v %v", i+1, n, d, err)
		}
	}
}

func newLeased(t *testing.T, rs *testredis.Server, max int, ttl time.Duration) *leased {
	t.Helper()
	// DialerRetries 1, as the gateway's own client: with go-redis' five
	// dial attempts the heartbeat to a killed Redis fails only at its
	// deadline, not at the refused dial.
	l := &leased{client: redis.NewClient(&redis.Options{Addr: rs.Addr(), MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true,
		ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second}), clock: newTestClock(0)}
	t.Cleanup(func() { l.client.Close() })
	count := func(c *atomic.Int64) func(n int) {
		return func(n int) {
			c.Add(int64(n))
			l.clock.kick.fire()
		}
	}
	r, err := NewRedis(withDefaults(RedisOptions{Client: l.client, Timeout: 300 * time.Millisecond, WireTimeout: 2 * time.Second,
		BusyTimeout: 2 * time.Second, Pipeline: true, LeaseMax: max, LeaseTTL: ttl, Clock: l.clock,
		OnCharged: count(&l.charged), OnFailure: func(FailureKind, error) { count(&l.failures)(1) },
		Leases: LeaseHooks{Granted: count(&l.granted), Spent: func() { count(&l.spent)(1) },
			Refunded: count(&l.refunded), Dropped: count(&l.dropped)}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	l.Redis = r
	return l
}

// storedTAT is a bucket's TAT in Redis, seconds since 2017; 0 when absent.
func storedTAT(t *testing.T, c *redis.Client, key string) float64 {
	t.Helper()
	v, err := c.Get(context.Background(), keyPrefix+key).Result()
	if errors.Is(err, redis.Nil) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// A single gateway keeps today's edges with leases on: a vendor's first
// 120 reads are allowed, the 121st refused, and the leases did the work:
// far fewer buckets charged in Redis than requests.
func TestLeaseSingleGatewayEdges(t *testing.T) {
	rs := testredis.Start(t)
	l := newLeased(t, rs, 16, time.Second)
	r := policy.Rate{Name: "reads", Limit: 120, Period: time.Minute}
	for i := 0; i < 120; i++ {
		d, err := l.Allow(one("vg:{v:1}:reads", r))
		if err != nil || !d.Allowed {
			t.Fatalf("read %d: %+v %v", i+1, d, err)
		}
	}
	d, err := l.Allow(one("vg:{v:1}:reads", r))
	if err != nil || d.Allowed {
		t.Fatalf("read 121: %+v %v", d, err)
	}
	if l.spent.Load() == 0 || l.charged.Load() >= 60 {
		t.Fatalf("leases unused: %d spent locally, %d buckets charged for 120 reads", l.spent.Load(), l.charged.Load())
	}
	t.Logf("120 reads: %d buckets charged in Redis, %d from leases", l.charged.Load(), l.spent.Load())
}

// lease_max 1 is no lease: every allowed read charges Redis.
func TestLeaseMaxOneIsExact(t *testing.T) {
	rs := testredis.Start(t)
	l := newLeased(t, rs, 1, time.Second)
	r := policy.Rate{Name: "reads", Limit: 120, Period: time.Minute}
	for i := 0; i < 50; i++ {
		if d, err := l.Allow(one("vg:{v:1}:reads", r)); err != nil || !d.Allowed {
			t.Fatalf("read %d: %+v %v", i+1, d, err)
		}
	}
	if l.spent.Load() != 0 || l.charged.Load() != 50 {
		t.Fatalf("lease_max 1: %d spent locally, %d charged for 50 reads", l.spent.Load(), l.charged.Load())
	}
}

// The RateLimit remaining counts this gateway's unused lease: it goes down
// one a read, leased or not.
func TestLeaseRemainingIsHonest(t *testing.T) {
	rs := testredis.Start(t)
	l := newLeased(t, rs, 8, time.Second)
	r := policy.Rate{Name: "reads", Limit: 120, Period: time.Hour} // no refill within the test
	prev := 120
	for i := 0; i < 40; i++ {
		d, err := l.Allow(one("vg:{v:1}:reads", r))
		if err != nil || !d.Allowed {
			t.Fatal(d, err)
		}
		if got := d.Results[0].Remaining; got != prev-1 {
			t.Fatalf("read %d: remaining %d after %d", i+1, got, prev)
		}
		prev--
	}
}

// A refusal by one bucket takes no token of another: the per-key bucket's
// lease tokens go back when the vendor's bucket refuses.
func TestLeaseRefusalTakesNothing(t *testing.T) {
	rs := testredis.Start(t)
	l := newLeased(t, rs, 8, time.Second)
	vendor := policy.Rate{Name: "reads", Limit: 5, Period: time.Hour}
	key := policy.Rate{Name: "key-reads", Limit: 1000, Period: time.Hour}
	cs := func() policy.Checks {
		var cs policy.Checks
		cs.Add(policy.Check{Key: "vg:{v:1}:reads", Rate: vendor})
		cs.Add(policy.Check{Key: "vg:{v:1}:k:1:reads", Rate: key})
		return cs
	}
	allowed := 0
	for i := 0; i < 40; i++ {
		d, err := l.Allow(cs())
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			allowed++
		}
	}
	if allowed != 5 {
		t.Fatalf("%d allowed, want the vendor's 5", allowed)
	}
	l.Close() // every lease back
	c := l.client
	used := (storedTAT(t, c, "vg:{v:1}:k:1:reads") - nowSince2017(t, c)) / (3.6) // key emission 3.6 s
	if math.Round(used) != 5 {
		t.Fatalf("key bucket holds %.2f tokens after close, want the 5 admitted", used)
	}
}

// nowSince2017 is Redis' clock in the script's terms.
func nowSince2017(t *testing.T, c *redis.Client) float64 {
	t.Helper()
	tm, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return float64(tm.UnixNano())/1e9 - 1483228800
}

// Unused tokens go back at close, and a refund never erases another
// gateway's later charge.
func TestLeaseRefundKeepsOthersCharges(t *testing.T) {
	rs := testredis.Start(t)
	a := newLeased(t, rs, 16, 10*time.Second)
	b := newLeased(t, rs, 1, time.Second)
	r := policy.Rate{Name: "reads", Limit: 3600, Burst: 1000, Period: time.Hour} // 1 s a token
	const key = "vg:{v:1}:reads"
	a.admit(t, key, r, 12) // demand builds; a lease comes
	if a.granted.Load() == 0 {
		t.Fatal("no lease granted")
	}
	b.admit(t, key, r, 5) // the other gateway charges after the grant
	a.Close()
	if a.refunded.Load() == 0 {
		t.Fatal("nothing refunded at close")
	}
	held := storedTAT(t, a.client, key) - nowSince2017(t, a.client)
	if got := math.Round(held); got != 17 {
		t.Fatalf("bucket holds %.2f tokens after the refund, want 12 + 5 admitted", held)
	}
}

// A bucket flushed while a lease is held gets no refund: the refund must
// not erase what was charged since.
func TestLeaseRefundAfterFlush(t *testing.T) {
	rs := testredis.Start(t)
	a := newLeased(t, rs, 16, 10*time.Second)
	b := newLeased(t, rs, 1, time.Second)
	r := policy.Rate{Name: "reads", Limit: 3600, Burst: 1000, Period: time.Hour}
	const key = "vg:{v:1}:reads"
	a.admit(t, key, r, 12)
	if a.granted.Load() == 0 {
		t.Fatal("no lease granted")
	}
	if err := a.client.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if d, err := b.Allow(one(key, r)); err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	before := storedTAT(t, a.client, key)
	a.Close()
	if after := storedTAT(t, a.client, key); after != before {
		t.Fatalf("refund after a flush moved the bucket: %.6f → %.6f", before, after)
	}
}

// A lease is honoured only while Redis answers: paused Redis, silent past
// the timeout, a busy bucket's read is not served from its lease but
// refused; once Redis is back, reads pass again.
func TestLeaseFailsClosed(t *testing.T) {
	rs := testredis.Start(t)
	l := newLeased(t, rs, 64, 10*time.Second)
	r := policy.Rate{Name: "reads", Limit: 100000, Period: time.Minute}
	const key = "vg:{v:1}:reads"
	l.admit(t, key, r, 200)
	if l.granted.Load() == 0 {
		t.Fatal("no lease granted")
	}
	silence(l.Redis, rs.Pause, 2*l.timeout) // silent past the timeout
	start := time.Now()
	_, err := l.Allow(one(key, r))
	rs.Resume()
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("read from a lease with Redis paused: %v, want ErrUnavailable", err)
	}
	t.Logf("refused after %s with Redis paused", time.Since(start))
	allowedAgain(t, l, one(key, r))
}

// Restarted Redis (its buckets gone) while leases are held: the leases are
// dropped by the heartbeat, whose dial is refused within a beat or two of
// the stop (within two timeouts of it), reads are refused while it is
// down, and after it, nothing refunded moves the new buckets.
func TestLeaseRedisRestart(t *testing.T) {
	rs := testredis.Start(t)
	l := newLeased(t, rs, 64, 10*time.Second)
	r := policy.Rate{Name: "reads", Limit: 100000, Period: time.Minute}
	const key = "vg:{v:1}:reads"
	l.admit(t, key, r, 200)
	rs.Stop()
	if !within(2*l.timeout, l.clock.kick, func() bool { return l.failures.Load() > 0 }) {
		t.Fatalf("no failed heartbeat within %s of the stop", 2*l.timeout)
	}
	if _, err := l.Allow(one(key, r)); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("read with Redis stopped: %v, want ErrUnavailable", err)
	}
	if l.dropped.Load() == 0 {
		t.Fatal("leases not dropped with Redis gone")
	}
	rs.Restart(t)
	allowedAgain(t, l, one(key, r))
}

// allowedAgain waits, up to 10 s, until Redis is back and cs is allowed
// (asked again at each event of l's: a failure, a beat of its lease
// loop).
func allowedAgain(t *testing.T, l *leased, cs policy.Checks) {
	t.Helper()
	var err error
	if !within(10*time.Second, l.clock.kick, func() bool {
		var d Decision
		d, err = l.Allow(cs)
		return err == nil && d.Allowed
	}) {
		t.Fatalf("Redis back, still %v", err)
	}
}

// replay counts how many of times (sorted) GCRA with rate r admits.
func replay(times []time.Time, r policy.Rate) int {
	var tat int64
	n := 0
	for _, at := range times {
		res, next := gcra(at.UnixNano(), tat, r)
		if res.Allowed {
			tat = next
			n++
		}
	}
	return n
}

// Three gateways on one Redis, one vendor at 120 reads a minute offered
// ten times its rate, 80/15/5 over the three with the heavy side moving
// every 10 s, for three minutes: the reads admitted, merged by the times
// they were answered, are all admitted by GCRA with burst + ceil(rate ×
// lease_ttl), and they reach 99 % of what GCRA with the plain burst admits
// of the same offered reads. At a lease_ttl of 1 s and at the shipped 2 s
// (a bound of 122 and of 124), side by side.
//
// The scenario runs four times faster than told (leaseBoundSpeed): 120
// reads in 15 s, a lease_ttl of 250 and 500 ms, the heavy side moving
// every 2.5 s, 45 s in all. Every ratio the bound depends on is kept (the
// tokens a lease can hold past its bucket, rate × lease_ttl, are 2 and 4;
// the reads offered, ten times the rate; the moves per period), and the
// three minutes of wall time were the longest wait of make test.
func TestLeaseBoundAcrossGateways(t *testing.T) {
	if testing.Short() {
		t.Skip("45 seconds")
	}
	t.Parallel()
	for _, ttl := range []time.Duration{time.Second, 2 * time.Second} {
		t.Run(ttl.String(), func(t *testing.T) {
			t.Parallel()
			leaseBound(t, ttl)
		})
	}
}

// leaseBoundSpeed is how much faster than told TestLeaseBoundAcrossGateways
// runs its scenario.
const leaseBoundSpeed = 4

func leaseBound(t *testing.T, told time.Duration) {
	fast := func(d time.Duration) time.Duration { return d / leaseBoundSpeed }
	ttl := fast(told)
	rs := testredis.Start(t)
	gws := []*leased{newLeased(t, rs, 16, ttl), newLeased(t, rs, 16, ttl), newLeased(t, rs, 16, ttl)}
	r := policy.Rate{Name: "reads", Limit: 120, Period: fast(time.Minute)}
	const key = "vg:{v:7}:reads"
	var mu sync.Mutex
	var offered, admitted []time.Time
	share := [3]int{80, 15, 5}
	tick := time.NewTicker(fast(50 * time.Millisecond)) // ten times the rate
	defer tick.Stop()
	start := time.Now()
	var wg sync.WaitGroup
	for i := 0; time.Since(start) < fast(3*time.Minute); i++ {
		<-tick.C
		heavy := int(time.Since(start)/fast(10*time.Second)) % 3
		pick := i % 100
		gw := heavy
		switch {
		case pick >= share[0]+share[1]:
			gw = (heavy + 2) % 3
		case pick >= share[0]:
			gw = (heavy + 1) % 3
		}
		wg.Add(1)
		go func(g *leased) {
			defer wg.Done()
			at := time.Now()
			d, err := g.Allow(one(key, r))
			done := time.Now()
			mu.Lock()
			defer mu.Unlock()
			offered = append(offered, at)
			if err != nil {
				t.Errorf("read: %v", err)
				return
			}
			if d.Allowed {
				admitted = append(admitted, done)
			}
		}(gws[gw])
	}
	wg.Wait()
	sort.Slice(offered, func(i, j int) bool { return offered[i].Before(offered[j]) })
	sort.Slice(admitted, func(i, j int) bool { return admitted[i].Before(admitted[j]) })
	extra := int(math.Ceil(float64(r.Limit) * ttl.Seconds() / r.Period.Seconds()))
	bound := r
	bound.Burst = r.EffectiveBurst() + extra
	if got := replay(admitted, bound); got != len(admitted) {
		t.Errorf("GCRA with burst %d admits %d of the %d reads admitted", bound.Burst, got, len(admitted))
	}
	ideal := replay(offered, r)
	if float64(len(admitted)) < 0.99*float64(ideal) {
		t.Errorf("%d reads admitted, under 99%% of the %d GCRA admits", len(admitted), ideal)
	}
	var spent, charged int64
	for _, g := range gws {
		spent += g.spent.Load()
		charged += g.charged.Load()
	}
	t.Logf("%d offered, %d admitted (GCRA: %d; bound burst %d), %d from leases, %d buckets charged", len(offered), len(admitted), ideal, bound.Burst, spent, charged)
}

// Orders at 10 a minute, placed by 20 concurrent clients across three
// gateways: at most the burst is admitted at once.
func TestLeaseOrdersAcrossGateways(t *testing.T) {
	rs := testredis.Start(t)
	gws := []*leased{newLeased(t, rs, 16, time.Second), newLeased(t, rs, 16, time.Second), newLeased(t, rs, 16, time.Second)}
	r := policy.Rate{Name: "orders", Limit: 10, Period: time.Minute}
	var ok atomic.Int64
	var wg sync.WaitGroup
	for c := 0; c < 20; c++ {
		wg.Add(1)
		go func(g *leased) {
			defer wg.Done()
			for i := 0; i < 5; i++ {
				d, err := g.Allow(one("vg:{v:9}:orders", r))
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					ok.Add(1)
				}
			}
		}(gws[c%3])
	}
	wg.Wait()
	// 100 orders within well under 6 s: the burst of 10, at most one more
	// refilled.
	if n := ok.Load(); n < 10 || n > 11 {
		t.Fatalf("%d orders admitted, want the burst of 10", n)
	}
}

// A reload sends the leases back and applies the new settings: with
// lease_max 1 every read charges Redis again.
func TestLeaseReload(t *testing.T) {
	rs := testredis.Start(t)
	l := newLeased(t, rs, 16, 10*time.Second)
	r := policy.Rate{Name: "reads", Limit: 3600, Burst: 1000, Period: time.Hour}
	const key = "vg:{v:1}:reads"
	l.admit(t, key, r, 12)
	if l.granted.Load() == 0 {
		t.Fatal("no lease granted")
	}
	l.SetLeases(1, time.Second)
	var held float64
	if !within(5*time.Second, l.clock.kick, func() bool {
		held = storedTAT(t, l.client, key) - nowSince2017(t, l.client)
		return math.Round(held) == 12 && l.refunded.Load() > 0
	}) {
		t.Fatalf("bucket holds %.2f tokens after the reload, want the 12 admitted", held)
	}
	before := l.charged.Load()
	l.admit(t, key, r, 10)
	if n := l.charged.Load() - before; n != 10 {
		t.Fatalf("lease_max 1 after reload: %d buckets charged for 10 reads", n)
	}
}

// The lease table forgets a bucket idle for two lease periods: its memory
// follows the active vendors, not every vendor ever seen. (The lease
// lives a second: the 100 reads must all be tracked at once, and with a
// 50ms lease they took longer than two lease periods under -race and two
// busy loops, the first buckets rightly forgotten before the count.)
func TestLeaseTableForgetsIdleBuckets(t *testing.T) {
	rs := testredis.Start(t)
	l := newLeased(t, rs, 16, time.Second)
	r := policy.Rate{Name: "reads", Limit: 1000, Period: time.Minute}
	for i := 0; i < 100; i++ {
		if _, err := l.Allow(one("vg:{v:"+strconv.Itoa(i)+"}:reads", r)); err != nil {
			t.Fatal(err)
		}
	}
	if n := l.leases.len(); n != 100 {
		t.Fatalf("%d buckets tracked after 100 vendors' reads", n)
	}
	if !within(5*time.Second, l.clock.kick, func() bool { return l.leases.len() == 0 }) {
		t.Fatalf("%d idle buckets still tracked", l.leases.len())
	}
}

// The script keeps redis_rate's stored value: a gateway of an older
// release (redis_rate's AllowN) and this one share a bucket during a
// rolling upgrade, each seeing the other's charges.
func TestScriptSharesRedisRateBuckets(t *testing.T) {
	rs := testredis.Start(t)
	l := newLeased(t, rs, 1, time.Second)
	old := redis_rate.NewLimiter(l.client)
	r := policy.Rate{Name: "reads", Limit: 120, Period: time.Minute}
	const key = "vg:{v:1}:reads"
	res, err := old.AllowN(context.Background(), key, redis_rate.PerMinute(120), 10)
	if err != nil || res.Allowed != 10 {
		t.Fatal(res, err)
	}
	d, err := l.Allow(one(key, r))
	if err != nil || !d.Allowed || d.Results[0].Remaining != 109 {
		t.Fatalf("after 10 by redis_rate: %+v %v, want 109 remaining", d.Results[0], err)
	}
	res, err = old.AllowN(context.Background(), key, redis_rate.PerMinute(120), 1)
	if err != nil || res.Allowed != 1 || res.Remaining < 107 || res.Remaining > 108 {
		t.Fatalf("redis_rate after ours: %+v %v, want 108 remaining (107 truncated)", res, err)
	}
}

// On a Redis Cluster, leases are granted and sent back per hash slot:
// after close, each vendor's bucket holds exactly what was admitted.
func TestLeaseCluster(t *testing.T) {
	cl := testredis.StartCluster(t)
	cl.WaitOK(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	var granted, refunded atomic.Int64
	r, err := NewRedis(withDefaults(RedisOptions{Client: c, Timeout: 2 * time.Second, Pipeline: true, LeaseMax: 16, LeaseTTL: 10 * time.Second,
		Leases: LeaseHooks{Granted: func(n int) { granted.Add(int64(n)) }, Refunded: func(n int) { refunded.Add(int64(n)) }}}))
	if err != nil {
		t.Fatal(err)
	}
	rate := policy.Rate{Name: "reads", Limit: 360, Burst: 1000, Period: time.Hour} // 10 s a token: the test's seconds under -race drain none
	const vendors, reads = 8, 20
	for i := 0; i < reads; i++ {
		for v := 0; v < vendors; v++ {
			if d, err := r.Allow(one(fmt.Sprintf("vg:{v:c%d}:reads", v), rate)); err != nil || !d.Allowed {
				t.Fatal(d, err)
			}
		}
	}
	r.Close()
	if granted.Load() == 0 || refunded.Load() == 0 {
		t.Fatalf("granted %d, refunded %d: leases unused", granted.Load(), refunded.Load())
	}
	for v := 0; v < vendors; v++ {
		key := fmt.Sprintf("vg:{v:c%d}:reads", v)
		val, err := c.Get(context.Background(), keyPrefix+key).Float64()
		if err != nil {
			t.Fatal(err)
		}
		tm, err := c.Time(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		if held := (val - (float64(tm.UnixNano())/1e9 - 1483228800)) / 10; math.Round(held) != reads {
			t.Errorf("vendor %d's bucket holds %.2f tokens after close, want the %d admitted", v, held, reads)
		}
	}
}

// BenchmarkLeasedAllow is a busy bucket's read decided from its lease: no
// Redis call, no allocation.
func BenchmarkLeasedAllow(b *testing.B) {
	rs := testredis.Start(b)
	c := redis.NewClient(&redis.Options{Addr: rs.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	defer c.Close()
	r, err := NewRedis(withDefaults(RedisOptions{Client: c, Timeout: time.Second, Pipeline: true, LeaseMax: 1000, LeaseTTL: time.Minute}))
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	cs := one("vg:{v:1}:reads", policy.Rate{Name: "reads", Limit: 1 << 30, Period: time.Minute})
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if d, err := r.Allow(cs); err != nil || !d.Allowed {
			b.Fatal(d, err)
		}
	}
}

// On a Redis Cluster, a lease is honoured only while the node holding its
// bucket answers: with that node silent past the timeout, a busy bucket's
// read is refused although another node keeps answering the same gateway.
func TestLeaseClusterSilentNode(t *testing.T) {
	cl := testredis.StartCluster(t)
	cl.WaitOK(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), MaxRetries: -1, ContextTimeoutEnabled: true,
		ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	t.Cleanup(func() { c.Close() })
	var granted atomic.Int64
	const timeout = 100 * time.Millisecond
	clk := newTestClock(timeout)
	r, err := NewRedis(withDefaults(RedisOptions{Client: c, Timeout: timeout, WireTimeout: 300 * time.Millisecond, BusyTimeout: 2 * time.Second,
		Pipeline: true, LeaseMax: 16, LeaseTTL: 10 * time.Second, Clock: clk, Leases: LeaseHooks{Granted: func(n int) { granted.Add(int64(n)) }}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	const busy = "vg:{v:s0}:reads"
	node := cl.NodeFor(t, keyPrefix+busy)
	other := ""
	for v := 1; other == ""; v++ {
		if k := fmt.Sprintf("vg:{v:s%d}:reads", v); cl.NodeFor(t, keyPrefix+k) != node {
			other = k
		}
	}
	leasedRate := policy.Rate{Name: "reads", Limit: 3600, Burst: 1000, Period: time.Hour}
	for i := 0; i < 20 || !r.leases.holds(busy, r.clock.Nanotime()); i++ {
		if d, err := r.Allow(one(busy, leasedRate)); err != nil || !d.Allowed || i == 100 {
			t.Fatal("no lease held after 100 reads", d, err)
		}
	}
	// The busy bucket's node silent past the timeout, on the limiter's
	// clock (what a lease is honoured by). The other vendor's reads go to
	// their node each time (a burst of 3 leaves nothing to lease) and keep
	// this gateway hearing from Redis: one before the busy bucket's read,
	// one while it waits.
	unleased := policy.Rate{Name: "reads", Limit: 1000000, Burst: 3, Period: time.Minute}
	otherRead := func() {
		if d, err := r.Allow(one(other, unleased)); err != nil || !d.Allowed {
			t.Errorf("the answering node's vendor: %+v %v", d, err)
		}
	}
	silence(r, node.Pause, 3*timeout)
	defer node.Resume()
	otherRead()
	for len(clk.armed) > 0 { // the reads' waits
		<-clk.armed
	}
	type result struct {
		d   Decision
		err error
	}
	busyRead := make(chan result, 1)
	go func() {
		d, err := r.Allow(one(busy, leasedRate))
		busyRead <- result{d, err}
	}()
	select {
	case <-clk.armed: // its call queued, waiting on the silent node
		otherRead()
	case x := <-busyRead:
		t.Fatalf("busy bucket's read decided without asking its node, silent for %s on the limiter's clock (timeout %s): allowed %v, %v",
			3*timeout, timeout, x.d.Allowed, x.err)
	}
	res := <-busyRead
	t.Logf("read with its node silent: %v", res.err)
	if res.err == nil && res.d.Allowed {
		t.Fatalf("read admitted from a lease with its node silent for %s on the limiter's clock (timeout %s)", 3*timeout, timeout)
	}
}

// Refunds of many buckets at once all reach Redis: at close, each of
// 19,200 buckets holds exactly what was admitted, its three reads from
// the moment the first was charged (Redis' clock read just before a
// request's first read and just after its third brackets it: a bucket
// holding a token more or less lies a whole interval outside).
func TestLeaseRefundManyBuckets(t *testing.T) {
	rs := testredis.Start(t)
	l := newLeased(t, rs, 16, time.Minute)
	r := policy.Rate{Name: "reads", Limit: 360, Burst: 1000, Period: time.Hour} // 10 s a token
	const emission = 10.0
	const requests, reads = 1200, 3 // 16 buckets a request; the third read takes a lease
	checks := func(i int) policy.Checks {
		var cs policy.Checks
		for j := 0; j < policy.MaxChecks; j++ {
			cs.Add(policy.Check{Key: fmt.Sprintf("vg:{v:%d}:b%d", i, j), Rate: r})
		}
		return cs
	}
	// Redis' clock (seconds since 2017) before each request's first read
	// and after its third.
	before, after := make([]float64, requests), make([]float64, requests)
	clock := func() (float64, error) {
		tm, err := l.client.Time(context.Background()).Result()
		return float64(tm.UnixNano())/1e9 - 1483228800, err
	}
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < requests; i += 16 {
				var err error
				if before[i], err = clock(); err != nil {
					t.Error(err)
					return
				}
				for n := 0; n < reads; n++ {
					if d, err := l.Allow(checks(i)); err != nil || !d.Allowed {
						t.Errorf("request %d read %d: %+v %v", i, n+1, d, err)
						return
					}
				}
				if after[i], err = clock(); err != nil {
					t.Error(err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if l.granted.Load() < requests*policy.MaxChecks {
		t.Fatalf("%d tokens leased, want one a bucket", l.granted.Load())
	}
	for i := range before {
		// Wider than an interval, the bracket could not tell a token more
		// or less.
		if after[i]-before[i] >= emission {
			t.Fatalf("request %d's reads took %.1f s, an interval or more", i, after[i]-before[i])
		}
	}
	l.Close()
	pipe := l.client.Pipeline()
	var cmds []*redis.StringCmd
	for i := 0; i < requests; i++ {
		for j := 0; j < policy.MaxChecks; j++ {
			cmds = append(cmds, pipe.Get(context.Background(), keyPrefix+fmt.Sprintf("vg:{v:%d}:b%d", i, j)))
		}
	}
	if _, err := pipe.Exec(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A stored TAT and Redis' clock are whole microseconds: a microsecond
	// of slack for their float64 sum.
	const slack = 1e-6
	wrong := 0
	for k, cmd := range cmds {
		tat, err := cmd.Float64()
		if err != nil {
			t.Fatal(err)
		}
		i := k / policy.MaxChecks
		if tat < before[i]+reads*emission-slack || tat > after[i]+reads*emission+slack {
			wrong++
		}
	}
	if wrong > 0 {
		t.Fatalf("%d of %d buckets do not hold the %d reads admitted after close (%d tokens refunded)",
			wrong, len(cmds), reads, l.refunded.Load())
	}
}

// A single gateway keeps the edges with several checks a request (the
// vendor's and the key's limits, each with a shadow twin) and concurrent
// requests: of 160 reads at once, exactly the vendor's 120 are admitted,
// and after close each enforced bucket holds exactly what was admitted.
func TestLeaseEdgesSeveralChecksConcurrent(t *testing.T) {
	rs := testredis.Start(t)
	l := newLeased(t, rs, 16, 10*time.Second)
	vendor := policy.Rate{Name: "reads", Limit: 120, Period: time.Hour} // 30 s a token: no refill within the test
	key := policy.Rate{Name: "key-reads", Limit: 1000, Period: time.Hour}
	shadowVendor := policy.Rate{Name: "reads", Limit: 60, Period: time.Hour, Shadow: true}
	shadowKey := policy.Rate{Name: "key-reads", Limit: 2000, Period: time.Hour, Shadow: true}
	cs := func() policy.Checks {
		var cs policy.Checks
		cs.Add(policy.Check{Key: "vg:{v:1}:reads", Rate: vendor})
		cs.Add(policy.Check{Key: "vg:{v:1}:reads:shadow", Rate: shadowVendor, Twin: true})
		cs.Add(policy.Check{Key: "vg:{v:1}:k:1:reads", Rate: key})
		cs.Add(policy.Check{Key: "vg:{v:1}:k:1:reads:shadow", Rate: shadowKey, Twin: true})
		return cs
	}
	var allowed, shadowDenied atomic.Int64
	concurrently(16, func(int) {
		for i := 0; i < 10; i++ {
			d, err := l.Allow(cs())
			if err != nil {
				t.Error(err)
				return
			}
			if d.Allowed {
				allowed.Add(1)
				if d.ShadowDenied {
					shadowDenied.Add(1)
				}
			}
		}
	})
	if allowed.Load() != 120 || shadowDenied.Load() != 60 {
		t.Fatalf("%d of 160 admitted (%d shadow-denied), want 120 (60)", allowed.Load(), shadowDenied.Load())
	}
	l.Close()
	now := nowSince2017(t, l.client)
	for _, b := range []struct {
		key      string
		emission float64
		want     float64
	}{{"vg:{v:1}:reads", 30, 120}, {"vg:{v:1}:k:1:reads", 3.6, 120}, {"vg:{v:1}:reads:shadow", 60, 60}, {"vg:{v:1}:k:1:reads:shadow", 1.8, 120}} {
		if held := (storedTAT(t, l.client, b.key) - now) / b.emission; math.Round(held) != b.want {
			t.Errorf("%s holds %.2f tokens after close, want %.0f (leased %d, spent %d, refunded %d, dropped %d, charged %d)",
				b.key, held, b.want, l.granted.Load(), l.spent.Load(), l.refunded.Load(), l.dropped.Load(), l.charged.Load())
		}
	}
}

// Close racing requests: once Close returned, no request is admitted, and
// every token leased went back (the busy bucket holds what was admitted).
func TestLeaseCloseRacingRequests(t *testing.T) {
	rs := testredis.Start(t)
	l := newLeased(t, rs, 16, 10*time.Second)
	r := policy.Rate{Name: "reads", Limit: 360, Burst: 100000, Period: time.Hour} // 10 s a token
	const key = "vg:{v:1}:reads"
	var admitted, after atomic.Int64
	var closed atomic.Bool
	time.AfterFunc(200*time.Millisecond, func() { l.Close(); closed.Store(true) })
	concurrently(32, func(int) {
		for !closed.Load() || after.Load() < 1000 {
			wasClosed := closed.Load()
			d, err := l.Allow(one(key, r))
			if err == nil && d.Allowed {
				admitted.Add(1)
				if wasClosed {
					t.Errorf("admitted after Close returned")
				}
			}
			if wasClosed {
				after.Add(1)
			}
		}
	})
	held := (storedTAT(t, l.client, key) - nowSince2017(t, l.client)) / 10
	if math.Round(held) != float64(admitted.Load()) {
		t.Fatalf("bucket holds %.2f tokens after close, want the %d admitted (%d leased, %d refunded)",
			held, admitted.Load(), l.granted.Load(), l.refunded.Load())
	}
}

// A refund gives back all of the lease that is still in the bucket's
// future, a part of a token included: a lease whose two unused tokens lie
// less than two emission intervals in the future at a reload (charged
// from Redis' now at the grant, which Redis' clock has since passed)
// leaves the bucket whole, as if they had never been leased. (The lease's
// second token is its request's own: the request failed for the backend,
// and its token went back to its lease. A lease's own tokens lie a whole
// interval each in the future until Redis' clock passes the request's
// own token, an interval after the grant; the request's own token back
// in it makes the part of a token without waiting on Redis' clock.)
func TestLeaseRefundKeepsNoFraction(t *testing.T) {
	rs := testredis.Start(t)
	a := newLeased(t, rs, 2, time.Minute)
	b := newLeased(t, rs, 1, time.Second)
	r := policy.Rate{Name: "reads", Limit: 1800, Burst: 1000, Period: time.Hour, Refund: true} // 2 s a token
	const key = "vg:{v:1}:reads"
	a.admit(t, key, r, 2) // demand builds
	// The bucket whole again (as after a flush): the third read's grant
	// charges from Redis' now.
	if err := a.client.Del(context.Background(), keyPrefix+key).Err(); err != nil {
		t.Fatal(err)
	}
	d, err := a.Allow(one(key, r)) // the third read takes a lease of one more (lease_max 2)
	if err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	if a.granted.Load() != 1 || a.spent.Load() != 0 {
		t.Fatalf("%d tokens leased, %d spent; want 1 leased, unspent", a.granted.Load(), a.spent.Load())
	}
	if n := a.Refund(one(key, r), d); n != 1 {
		t.Fatalf("the third read's token went back to %d buckets, want its lease's", n)
	}
	// A reload: the refund goes out in the next beat of the lease loop.
	a.SetLeases(2, time.Minute)
	if !within(5*time.Second, a.clock.kick, func() bool { return a.refunded.Load() > 0 }) {
		t.Fatalf("no refund within 5 s of the reload (%d leased, %d spent, %d dropped)", a.granted.Load(), a.spent.Load(), a.dropped.Load())
	}
	nextBeat(t, a.clock) // sent in the beat that queued it
	d, err = b.Allow(one(key, r))
	if err != nil || !d.Allowed || d.Results[0].Remaining != 999 {
		t.Fatalf("after the refund of %d tokens: %+v %v, want 999 remaining of the 1000 burst", a.refunded.Load(), d.Results[0], err)
	}
}

// A token given back to a lease already sent back (a reload while its
// request waited on Redis for another bucket, which refused) is not sent
// back a second time: the second refund would erase another gateway's
// charge made just before. (The other gateway charges more than a lease
// holds: the bucket then lies past the grant's TAT after the first refund
// too, so that the fence would not stop a second.)
//
// The order is the test's to check, not to assume: the reload's refund
// must be queued while the request still waits. Under a loaded machine
// the next beat of the lease loop may come over a beat after Redis was
// last heard, and its heartbeat to the paused Redis then drops every
// lease (as it should), or the request may end before the beat. An
// attempt where that happened says so and the scenario is played again
// on buckets of their own; the test fails when no attempt of five played
// it.
func TestLeaseGiveBackAfterRefund(t *testing.T) {
	rs := testredis.Start(t)
	for attempt := 1; attempt <= 5; attempt++ {
		played, why := giveBackAfterRefund(t, rs, attempt)
		if played {
			return
		}
		t.Logf("attempt %d did not play the scenario: %s", attempt, why)
	}
	t.Fatal("in 5 attempts the reload's refund was never queued while the request waited on Redis")
}

// giveBackAfterRefund plays TestLeaseGiveBackAfterRefund's scenario once,
// on vendor v's buckets, and reports whether it played as meant (and why
// not).
func giveBackAfterRefund(t *testing.T, rs *testredis.Server, v int) (bool, string) {
	a := newLeased(t, rs, 16, time.Minute)
	b := newLeased(t, rs, 1, time.Second)
	defer a.Close()
	r := policy.Rate{Name: "reads", Limit: 3600, Burst: 1000, Period: time.Hour} // 1 s a token
	scarce := policy.Rate{Name: "key-reads", Limit: 1, Period: time.Hour}
	key, other := fmt.Sprintf("vg:{v:%d}:reads", v), fmt.Sprintf("vg:{v:%d}:k:1:reads", v)
	for a.granted.Load()-a.spent.Load() < 3 { // a lease of 3 unused at least
		if d, err := a.Allow(one(key, r)); err != nil || !d.Allowed || a.charged.Load() > 20 {
			t.Fatal("no lease of 3", d, err)
		}
	}
	if d, err := b.Allow(one(other, scarce)); err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	// The other gateway charges 20 after the grant. The bucket is to keep
	// every charge but the lease's unused tokens but one, sent back once
	// by the reload below (none of them drained yet: 1 s a token); the
	// one is taken by a request meanwhile, given back after the refund,
	// and lost.
	unused := a.granted.Load() - a.spent.Load()
	b.admit(t, key, r, 20)
	want := storedTAT(t, a.client, key) - float64(unused-1)
	// A request of both buckets takes a token of a's lease and waits on
	// Redis (paused) for the scarce one; meanwhile a reload sends the rest
	// of the lease back; Redis refuses the scarce bucket, and the token
	// goes back to the lease.
	spent, dropped := a.spent.Load(), a.dropped.Load()
	rs.Pause()
	done := make(chan struct{})
	go func() {
		defer close(done)
		var cs policy.Checks
		cs.Add(policy.Check{Key: key, Rate: r})
		cs.Add(policy.Check{Key: other, Rate: scarce})
		if d, err := a.Allow(cs); err == nil && d.Allowed {
			t.Error("admitted beyond the scarce bucket")
		}
	}()
	taken := within(10*time.Second, a.clock.kick, func() bool { return a.spent.Load() != spent })
	a.SetLeases(16, time.Minute)
	queued := within(10*time.Second, a.clock.kick, func() bool {
		return a.refunded.Load() >= unused-1 || a.dropped.Load() != dropped
	})
	rs.Resume()
	<-done
	switch {
	case !taken:
		t.Fatal("the request took no token of the lease within 10 s")
	case !queued:
		t.Fatalf("within 10 s of the reload nothing of the lease was sent back or dropped (%d refunded, %d dropped)",
			a.refunded.Load(), a.dropped.Load()-dropped)
	}
	// As meant when the reload queued the lease's unused tokens but the
	// one taken (all of them: the request ended first; none: the
	// heartbeat dropped the lease).
	if got := a.refunded.Load(); got != unused-1 {
		return false, fmt.Sprintf("%d tokens sent back, want %d (the heartbeat failed on the paused Redis, or the request ended before the beat)",
			got, unused-1)
	}
	if lost := a.dropped.Load() - dropped; lost != 1 {
		t.Errorf("%d tokens lost, want the one given back after its lease was sent back", lost)
	}
	a.Close()
	if got := storedTAT(t, a.client, key); got < want-0.1 {
		t.Fatalf("the bucket holds %.2f tokens less than its charges but the %d unused tokens of the lease sent back: a charge erased", want-got, unused-1)
	}
	return true, ""
}

// Two grants merged into one lease (two requests' calls at once) keep each
// grant's TAT for its own tokens, and the earlier expiry, whatever order
// the replies came in: a refund never reckons the charges other gateways
// made between the two grants as this lease's.
func TestLeaseMergedGrantsKeepTheirTATs(t *testing.T) {
	for _, order := range []string{"in order", "reversed"} {
		t.Run(order, func(t *testing.T) {
			l := newLeases(16, time.Second, func() bool { return true }, LeaseHooks{})
			r := policy.Rate{Name: "reads", Limit: 60, Period: time.Minute}
			now := time.Now().UnixNano()
			first := func() { l.grant("b", r, Result{Remaining: 50}, grant{n: 5, tatUS: 1_000_000}, 0, 0, now, now) }
			second := func() {
				l.grant("b", r, Result{Remaining: 40}, grant{n: 4, tatUS: 9_000_000}, 0, 0, now+int64(time.Millisecond), now)
			}
			if order == "in order" {
				first()
				second()
			} else {
				second()
				first()
			}
			if _, _, _, ok := l.take("b", now, false); !ok { // spends the earlier grant's first
				t.Fatal("no token from the merged lease")
			}
			got := l.sweep(now, true)
			want := []refund{{key: keyPrefix + "b", emission: 1, unused: 3, tatGrantUS: 9_000_000}, {key: keyPrefix + "b", emission: 1, unused: 3, tatGrantUS: 1_000_000}}
			if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
				t.Fatalf("refunds %+v, want %+v", got, want)
			}
		})
	}
}

// A third grant merged into a lease folds the two earlier segments under
// the earlier TAT, counting the tokens positioned past it: their refund
// reaches that far, instead of being capped at the earlier grant's future
// (which kept 30 tokens of a per-key bucket charged for nothing in
// TestLeaseEdgesSeveralChecksConcurrent).
func TestLeaseFoldedSegmentsRefundInFull(t *testing.T) {
	l := newLeases(16, time.Second, func() bool { return true }, LeaseHooks{})
	r := policy.Rate{Name: "reads", Limit: 60, Period: time.Minute}
	now := time.Now().UnixNano()
	for _, tat := range []int64{1_000_000, 3_000_000, 5_000_000} { // three grants of two tokens
		l.grant("b", r, Result{Remaining: 50}, grant{n: 3, tatUS: tat}, 0, 0, now, now)
	}
	if _, _, _, ok := l.take("b", now, false); !ok { // the earliest grant's first
		t.Fatal("no token from the lease")
	}
	got := l.sweep(now, true)
	want := []refund{{key: keyPrefix + "b", emission: 1, unused: 2, tatGrantUS: 5_000_000},
		{key: keyPrefix + "b", emission: 1, unused: 3, tatGrantUS: 1_000_000, after: 2}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("refunds %+v, want %+v", got, want)
	}
}

// A token given back by a refused request goes back to the lease it came
// from, or, when that lease ran out and a new one was granted meanwhile,
// to the new lease's older segment under its own grant's TAT: either way
// it is refunded once, with its grant's future. When its lease was sent
// back meanwhile it is lost (a second refund of one grant could erase
// another gateway's later charge), and counted as dropped.
func TestLeaseTokensGivenBack(t *testing.T) {
	r := policy.Rate{Name: "reads", Limit: 60, Period: time.Minute}
	now := time.Now().UnixNano()
	var dropped int
	newL := func() *leases {
		return newLeases(16, time.Second, func() bool { return true }, LeaseHooks{Dropped: func(n int) { dropped += n }})
	}
	take := func(l *leases) ticket {
		t.Helper()
		_, tk, _, ok := l.take("b", now, false)
		if !ok {
			t.Fatal("no token from the lease")
		}
		return tk
	}
	check := func(got, want []refund) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Fatalf("refunds %+v, want %+v", got, want)
		}
	}
	b := keyPrefix + "b"

	t.Run("after a new grant", func(t *testing.T) {
		l := newL()
		l.grant("b", r, Result{Remaining: 50}, grant{n: 4, tatUS: 2_000_000}, 0, 0, now, now) // 3 leased
		t1, t2, _ := take(l), take(l), take(l)
		l.grant("b", r, Result{Remaining: 40}, grant{n: 3, tatUS: 8_000_000}, 0, 0, now, now) // ran out: 2 more
		l.giveBack("b", t1, now)
		l.giveBack("b", t2, now)
		check(l.sweep(now, true), []refund{{key: b, emission: 1, unused: 2, tatGrantUS: 8_000_000},
			{key: b, emission: 1, unused: 2, tatGrantUS: 2_000_000}})
	})
	t.Run("to its expired lease", func(t *testing.T) {
		l := newL()
		l.grant("b", r, Result{Remaining: 50}, grant{n: 4, tatUS: 2_000_000}, 0, 0, now, now)
		t1 := take(l)
		l.giveBack("b", t1, now+int64(2*time.Second)) // past the lease's life, not yet swept
		check(l.sweep(now+int64(2*time.Second), false), []refund{{key: b, emission: 1, unused: 3, tatGrantUS: 2_000_000}})
	})
	t.Run("after its lease was sent back", func(t *testing.T) {
		l := newL()
		dropped = 0
		l.grant("b", r, Result{Remaining: 50}, grant{n: 4, tatUS: 2_000_000}, 0, 0, now, now)
		t1 := take(l)
		check(l.sweep(now, true), []refund{{key: b, emission: 1, unused: 2, tatGrantUS: 2_000_000}})
		l.grant("b", r, Result{Remaining: 40}, grant{n: 3, tatUS: 8_000_000}, 0, 0, now, now)
		l.giveBack("b", t1, now)
		if dropped != 1 {
			t.Fatalf("%d tokens dropped, want the one given back", dropped)
		}
		check(l.sweep(now, true), []refund{{key: b, emission: 1, unused: 2, tatGrantUS: 8_000_000}})
	})
	// Its lease spent to the end, a token of it given back joins the next
	// lease, which is sent back with it: that refund reckoned the grant's
	// future. Another token of the first lease given back after that (a
	// request refunded for the backend's failure, up to 1.5 lease_ttl
	// later) is lost too: in a third lease it would go back a second time
	// under the same grant's TAT, and erase a later charge (TestSimulation's
	// seeds 1002221 and 1030917).
	t.Run("after a later lease holding its grant was sent back", func(t *testing.T) {
		l := newL()
		dropped = 0
		l.grant("b", r, Result{Remaining: 50}, grant{n: 4, tatUS: 2_000_000}, 0, 0, now, now)
		t1, t2, _ := take(l), take(l), take(l)
		l.grant("b", r, Result{Remaining: 40}, grant{n: 3, tatUS: 8_000_000}, 0, 0, now, now)
		l.giveBack("b", t1, now)
		check(l.sweep(now, true), []refund{{key: b, emission: 1, unused: 2, tatGrantUS: 8_000_000},
			{key: b, emission: 1, unused: 1, tatGrantUS: 2_000_000}})
		l.grant("b", r, Result{Remaining: 30}, grant{n: 3, tatUS: 14_000_000}, 0, 0, now, now)
		l.giveBack("b", t2, now)
		if dropped != 1 {
			t.Fatalf("%d tokens dropped, want the one given back", dropped)
		}
		check(l.sweep(now, true), []refund{{key: b, emission: 1, unused: 2, tatGrantUS: 14_000_000}})
	})
	// A token given back to a later lease is spent no later than its own
	// lease's life: the later lease expires by it (step 2 of the bound's
	// argument: a token is spent within lease_ttl of its charge).
	// TestSimulation's per-token check found it: a request refunded for
	// the backend's failure, its token spent up to 1.8 s past its lease.
	t.Run("into a later lease, which expires by the token's", func(t *testing.T) {
		l := newL()
		l.grant("b", r, Result{Remaining: 50}, grant{n: 4, tatUS: 2_000_000}, 0, 0, now, now) // expires at now+1s
		t1, _, _ := take(l), take(l), take(l)
		half := now + int64(500*time.Millisecond)
		l.grant("b", r, Result{Remaining: 40}, grant{n: 3, tatUS: 8_000_000}, 0, 0, half, half) // would expire at now+1.5s
		l.giveBack("b", t1, half)
		if _, _, _, ok := l.take("b", now+int64(1200*time.Millisecond), false); ok {
			t.Fatal("a token of a lease that expired at now+1s spent at now+1.2s")
		}
	})
	// Redis failed (the epoch moved on) while a request held a lease's
	// last token; a new lease was granted since. The token given back is
	// lost: in the new lease it would be spent after the failure.
	t.Run("after Redis failed, not into a later lease", func(t *testing.T) {
		l := newL()
		dropped = 0
		l.grant("b", r, Result{Remaining: 50}, grant{n: 4, tatUS: 2_000_000}, 0, 0, now, now)
		t1, _, _ := take(l), take(l), take(l)
		l.drop()
		l.grant("b", r, Result{Remaining: 40}, grant{n: 3, tatUS: 8_000_000}, 0, 1, now, now)
		l.giveBack("b", t1, now)
		if dropped != 1 {
			t.Fatalf("%d tokens dropped, want the one given back", dropped)
		}
		check(l.sweep(now, true), []refund{{key: b, emission: 1, unused: 2, tatGrantUS: 8_000_000}})
	})
}
