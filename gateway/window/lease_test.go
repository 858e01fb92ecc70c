package window

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"vendorgate/gateway/policy"
	"vendorgate/shared/testredis"
)

// leasedLimiter is a limiter on rs, on the test's clock, whose quotas
// marked Lease are leased (lease_max most, lease_ttl ttl on that clock).
// Its sweeper is stopped: the test sweeps (sweep) when it chooses, so that
// what the leases hold is known at every step.
func leasedLimiter(t testing.TB, rs *testredis.Server, now *time.Time, most int, ttl time.Duration) *Redis {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: rs.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	r, err := NewRedis(RedisOptions{Client: c, Conn: transport(t, c, 500*time.Millisecond), Timeout: 500 * time.Millisecond,
		LeaseMax: most, LeaseTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	r.now = func() int64 { return now.UnixMilli() }
	r.closed.Do(func() { close(r.stop); <-r.swept })
	return r
}

func leasedQuota(name string, limit int) policy.Rate {
	r := quota(name, limit, policy.Calendar{Days: 1})
	r.Lease = true
	return r
}

// TestLeasedQuotaAccounts: three gateways lease two daily quotas of one
// vendor (40 a day, and 25 a day on its key) on one Redis, on one test
// clock that crosses midnight, with seeded random requests (each counting
// one quota or both), refunds (a later limit refusing) and sweeps. From
// the outside, after every step, for each quota and window:
//   - never more admitted than the quota (less what was refunded);
//   - Redis' counter is exactly what was admitted and kept plus what the
//     gateways' leases hold of that window unspent: nothing lost, nothing
//     counted twice, so a refusal (Redis found no room) came when admitted
//     and held together filled the quota;
//   - no gateway holds more than lease_max of a bucket;
//   - a request with two quotas takes from neither when one refuses;
//   - a request is charged in the window it falls in (a slice taken
//     before midnight is not spent after it).
//
// After every gateway gives back what it holds, the counters are what was
// admitted. A failure prints its seed.
func TestLeasedQuotaAccounts(t *testing.T) {
	rs, info := redisAndReader(t)
	const most = 8
	rates := []policy.Rate{leasedQuota("day", 40), leasedQuota("keyday", 25)}
	for seed := uint64(1); seed <= 12; seed++ {
		rng := rand.New(rand.NewPCG(seed, 77))
		now := time.Date(2026, 3, 1, 23, 59, 0, 0, time.UTC)
		var ls []*Redis
		for range 3 {
			ls = append(ls, leasedLimiter(t, rs, &now, most, 2*time.Second))
		}
		buckets := []string{fmt.Sprintf("vg:{v:s%d}:day", seed), fmt.Sprintf("vg:{v:s%d}:k:key:keyday", seed)}
		admitted := map[string]int{} // bucket + window start
		refused, refunded, spentLeased := 0, 0, 0
		type charge struct {
			l  *Redis
			cs policy.Checks
			d  Decision
		}
		var kept []charge
		check := func(step int) {
			t.Helper()
			day := now.Truncate(24 * time.Hour).Unix()
			// Every counter in one round trip: the test reads them after each of
			// its 4,800 steps.
			var names []string
			for _, start := range []int64{day, day - 86400} {
				for _, bucket := range buckets {
					names = append(names, keyPrefix+quotaKey(bucket, start))
				}
			}
			counters, err := info.MGet(context.Background(), names...).Result()
			if err != nil {
				t.Fatal(err)
			}
			for i, start := range []int64{day, day - 86400} {
				for b, bucket := range buckets {
					k := bucket + ":" + strconv.FormatInt(start, 10)
					counter := 0
					if v, ok := counters[i*len(buckets)+b].(string); ok {
						if counter, err = strconv.Atoi(v); err != nil {
							t.Fatal(err)
						}
					}
					held := 0
					for _, l := range ls {
						h := l.held(bucket, start)
						if le := l.leases.m[bucket]; le != nil && le.tokens > most {
							t.Fatalf("seed %d step %d: a gateway holds %d tokens of %s, past lease_max %d", seed, step, le.tokens, bucket, most)
						}
						held += h
					}
					if admitted[k] > rates[b].Limit {
						t.Fatalf("seed %d step %d: %d admitted in %s's window %d, over its quota %d", seed, step, admitted[k], bucket, start, rates[b].Limit)
					}
					if counter != admitted[k]+held {
						t.Fatalf("seed %d step %d: %s's counter of window %d is %d, want %d admitted + %d held", seed, step, bucket, start, counter, admitted[k], held)
					}
				}
			}
		}
		for step := 0; step < 400; step++ {
			now = now.Add(time.Duration(rng.IntN(400)) * time.Millisecond)
			l := ls[rng.IntN(len(ls))]
			route := rng.IntN(3) // the vendor's quota, the key's, or both
			var cs policy.Checks
			for b := range buckets {
				if route == b || route == 2 {
					cs.Add(policy.Check{Key: buckets[b], Rate: rates[b]})
				}
			}
			switch rng.IntN(10) {
			case 0:
				l.sweep(false)
			case 1:
				if len(kept) > 0 { // a later limit refused one admitted
					i := rng.IntN(len(kept))
					c := kept[i]
					kept = append(kept[:i], kept[i+1:]...)
					c.l.Refund(c.cs, c.d)
					for j := 0; j < c.cs.Count; j++ {
						admitted[c.cs.List[j].Key+":"+strconv.FormatInt(c.d.Results[j].start, 10)]--
					}
					refunded++
				}
			}
			// Until one charge is seen decided from a slice (no script call),
			// Redis' count of calls is read around each.
			var scripts int64
			if spentLeased == 0 {
				scripts = rs.Info(t, "commandstats").Scripts()
			}
			d, err := l.Charge(cs)
			if err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			if spentLeased == 0 && rs.Info(t, "commandstats").Scripts() == scripts {
				spentLeased++
			}
			if !d.Allowed {
				refused++
				for j := 0; j < cs.Count; j++ {
					if d.Results[j].charged {
						t.Fatalf("seed %d step %d: refused, yet %s is charged", seed, step, cs.List[j].Key)
					}
				}
			} else {
				for j := 0; j < cs.Count; j++ {
					if day := now.Truncate(24 * time.Hour).Unix(); d.Results[j].start != day {
						t.Fatalf("seed %d step %d: admitted at %v on a token of window %d, not of its day %d", seed, step, now, d.Results[j].start, day)
					}
					admitted[cs.List[j].Key+":"+strconv.FormatInt(d.Results[j].start, 10)]++
				}
				kept = append(kept, charge{l, cs, d})
			}
			check(step)
		}
		for _, l := range ls {
			l.sweep(true)
		}
		check(-1)
		for _, l := range ls {
			if n := l.leases.lost.Load(); n != 0 {
				t.Fatalf("seed %d: %d tokens not given back", seed, n)
			}
		}
		if refused == 0 || refunded == 0 || spentLeased == 0 {
			t.Fatalf("seed %d: %d refused, %d refunded, no charge decided from a slice: the run did not reach every case", seed, refused, refunded)
		}
	}
}

// A leased quota's slices follow demand: the first request of a bucket
// asks Redis for its own token only; a steady stream then takes slices of
// up to lease_max. 2,000 requests at 100 a second of one vendor's quota of
// 100,000 a day make at most one script call in 10 (lease_max 16, at most
// 1 in 16 once the demand is known); the counter, once the gateway gave
// back what it held, is what was admitted. With lease_max 1 every request
// is a script call, as an exact quota's.
func TestLeasedQuotaScriptCalls(t *testing.T) {
	rs := testredis.Start(t)
	for _, tc := range []struct {
		most     int
		max, min float64 // script calls a request
	}{{16, 0.1, 0.05}, {1, 1.01, 0.99}} {
		now := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
		l := leasedLimiter(t, rs, &now, tc.most, 2*time.Second)
		bucket := fmt.Sprintf("vg:{v:m%d}:day", tc.most)
		cs := checks(policy.Check{Key: bucket, Rate: leasedQuota("day", 100000)})
		before := rs.Info(t, "commandstats").Scripts()
		const n = 2000
		for i := 0; i < n; i++ {
			d, err := l.Charge(cs)
			if err != nil || !d.Allowed {
				t.Fatalf("request %d: %v, allowed %v", i, err, d.Allowed)
			}
			if i == 0 && l.held(bucket, now.Truncate(24*time.Hour).Unix()) != 0 {
				t.Fatalf("the first request took a slice: want its own token only")
			}
			now = now.Add(10 * time.Millisecond)
		}
		per := float64(rs.Info(t, "commandstats").Scripts()-before) / n
		t.Logf("lease_max %d: %.4f script calls a request", tc.most, per)
		if per > tc.max || per < tc.min {
			t.Errorf("lease_max %d: %.3f script calls a request, want %.2f to %.2f", tc.most, per, tc.min, tc.max)
		}
		l.sweep(true)
		got, err := redis.NewClient(&redis.Options{Addr: rs.Addr()}).Get(context.Background(), keyPrefix+quotaKey(bucket, now.Truncate(24*time.Hour).Unix())).Int()
		if err != nil || got != n {
			t.Errorf("lease_max %d: the counter is %d (%v) after the give-back, want %d", tc.most, got, err, n)
		}
	}
}

// A give-back counts once however often it is sent (a retry after a lost
// answer, a Cluster client sending a pipeline again); a reload gives back
// what the leases hold, so that the next slices are taken under the new
// settings.
func TestLeasedQuotaGiveBackOnceAndReload(t *testing.T) {
	q := newDayQuota(t, "vg:{v:once}:day")
	l, info, now, bucket, cs, start := q.l, q.info, q.now, q.bucket, q.cs, q.start
	counter := func() int {
		n, err := q.counter()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	chargeAll(t, l, cs, now, 20) // the demand grows: slices beyond the requests
	held := l.held(bucket, start)
	if held == 0 || counter() != 20+held {
		t.Fatalf("counter %d, %d held after 20 requests: want a slice held", counter(), held)
	}
	l.SetLeases(16, 2*time.Second) // a reload
	l.leases.mu.Lock()
	back := append([]giveBack(nil), l.leases.back...)
	spendable := l.leases.m[bucket].tokens
	l.leases.mu.Unlock()
	if spendable != 0 || len(back) != 1 || back[0].n != held {
		t.Fatalf("after the reload: %d spendable, %+v queued; want the %d held queued to go back", spendable, back, held)
	}
	for range 2 { // the same give-back sent twice
		if err := l.sendBack(back); err != nil {
			t.Fatal(err)
		}
	}
	if got := counter(); got != 20 {
		t.Fatalf("counter %d after the give-back sent twice, want the 20 admitted", got)
	}
	// A slice that ends unused goes back with the bucket's next lease call.
	chargeAll(t, l, cs, now, 20)
	*now = now.Add(3 * time.Second) // past lease_ttl: the slice ended
	if d, err := l.Charge(cs); err != nil || !d.Allowed {
		t.Fatalf("the request after the slice ended: %v", err)
	}
	// Both ways back (the give-back's own script, the lease call) leave
	// the id's mark for giveBackMark.
	marks, err := info.Keys(context.Background(), keyPrefix+bucket+":g*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(marks) != 2 {
		t.Fatalf("give-back marks %v, want 2: one by each way back", marks)
	}
	for _, m := range marks {
		if ttl := info.PTTL(context.Background(), m).Val(); ttl <= giveBackMark-time.Minute || ttl > giveBackMark {
			t.Fatalf("mark %s kept %v, want %v", m, ttl, giveBackMark)
		}
	}
}

// A give-back sent after Redis lost its scripts (SCRIPT FLUSH; a
// restart) is refused by digest and sent again whole: the tokens go back.
func TestLeasedQuotaGiveBackAfterScriptFlush(t *testing.T) {
	q := newDayQuota(t, "vg:{v:flush}:day")
	chargeAll(t, q.l, q.cs, q.now, 20)
	held := q.l.held(q.bucket, q.start)
	if held == 0 {
		t.Fatal("no slice held after 20 requests")
	}
	q.rs.Do(t, "SCRIPT", "FLUSH")
	if err := q.l.sendBack([]giveBack{q.l.giveBack(q.bucket, q.start, held, q.l.clock())}); err != nil {
		t.Fatal(err)
	}
	if n, err := q.counter(); err != nil || n != 20 {
		t.Fatalf("counter %d (%v) after giving back %d with the scripts flushed, want the 20 admitted", n, err, held)
	}
}

// Redis loses its data (FLUSHALL) while a gateway holds a slice of a
// leased quota of 100: the quota restarts from zero, as an exact one does,
// and the slice held then is spent on top; once a call finds the counter
// gone, the marker tells the gateway, which drops its leases, so that
// nothing it held is given back to the new counter. In that window the
// gateway admits at most the quota, the slice and a give-back more (100 +
// 2 × lease_max), and the new counter is what was admitted since the
// flush less at most that slice.
func TestLeasedQuotaDataLost(t *testing.T) {
	rs, info := redisAndReader(t)
	now := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	const most, quota = 16, 100
	l := leasedLimiter(t, rs, &now, most, 2*time.Second)
	var lost atomic.Int64
	l.o.OnDataLost = func() { lost.Add(1) }
	const bucket = "vg:{v:lost}:day"
	cs := checks(policy.Check{Key: bucket, Rate: leasedQuota("day", quota)})
	start := now.Truncate(24 * time.Hour).Unix()
	chargeAll(t, l, cs, &now, 30) // demand known: slices of up to lease_max
	markerChecked(t, l, 1)
	held := l.held(bucket, start)
	if held == 0 {
		t.Fatal("no slice held before the flush: the test shows nothing")
	}
	rs.Do(t, "FLUSHALL")
	admitted := 0
	for i := 0; i < 3*quota; i++ {
		d, err := l.Charge(cs)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		}
		now = now.Add(10 * time.Millisecond)
		if i == 20 {
			markerChecked(t, l, 2) // the call that found the counter gone asked
		}
	}
	t.Logf("%d admitted after the flush, %d held at it", admitted, held)
	if lost.Load() != 1 {
		t.Fatalf("OnDataLost told %d times, want once", lost.Load())
	}
	if admitted < quota || admitted > quota+2*most {
		t.Fatalf("%d admitted after the flush, want the quota %d and at most %d more", admitted, quota, 2*most)
	}
	l.sweep(true)
	counter, err := info.Get(context.Background(), keyPrefix+quotaKey(bucket, start)).Int()
	if err != nil || counter < admitted-held || counter > admitted {
		t.Fatalf("the new counter %d (%v), want the %d admitted since the flush, less at most the %d held then", counter, err, admitted, held)
	}
}

// chargeAll charges cs n times, 10 ms apart on now, and fails unless each
// is admitted.
func chargeAll(t *testing.T, l *Redis, cs policy.Checks, now *time.Time, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if d, err := l.Charge(cs); err != nil || !d.Allowed {
			t.Fatalf("request %d of %d: %v", i, n, err)
		}
		*now = now.Add(10 * time.Millisecond)
	}
}

// dayQuota is one bucket of a leased daily quota of 1,000 on a Redis of
// its own (lease_max 16, lease_ttl 2 s), on a clock the test moves, and a
// client to read its counter with.
type dayQuota struct {
	rs     *testredis.Server
	info   *redis.Client
	l      *Redis
	now    *time.Time
	bucket string
	cs     policy.Checks
	start  int64 // the day's window
}

func newDayQuota(t *testing.T, bucket string) *dayQuota {
	t.Helper()
	rs, info := redisAndReader(t)
	now := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	return &dayQuota{rs: rs, info: info, l: leasedLimiter(t, rs, &now, 16, 2*time.Second), now: &now, bucket: bucket,
		cs: checks(policy.Check{Key: bucket, Rate: leasedQuota("day", 1000)}), start: now.Truncate(24 * time.Hour).Unix()}
}

// counter is the day's counter in Redis.
func (q *dayQuota) counter() (int, error) {
	return q.info.Get(context.Background(), keyPrefix+quotaKey(q.bucket, q.start)).Int()
}

// redisAndReader starts a Redis and a client of its own, for a test to
// read the counters with.
func redisAndReader(t *testing.T) (*testredis.Server, *redis.Client) {
	t.Helper()
	rs := testredis.Start(t)
	info := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	t.Cleanup(func() { info.Close() })
	return rs, info
}
