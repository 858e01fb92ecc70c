package window

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"vendorgate/config"
	"vendorgate/gateway/limit/redisconn"
	"vendorgate/gateway/policy"
	"vendorgate/shared/testredis"
)

// clocked is a limiter under test and the clock it decides by.
type clocked struct {
	name string
	l    Limiter
	now  *time.Time
}

func newRedisLimiter(t testing.TB, rs *testredis.Server, now *time.Time) *Redis {
	c := redis.NewClient(&redis.Options{Addr: rs.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	r, err := NewRedis(RedisOptions{Client: c, Conn: transport(t, c, 500*time.Millisecond), Timeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if now != nil {
		r.now = func() int64 { return now.UnixMilli() }
	}
	return r
}

// both runs fn against the in-process limiter and against the script in a
// real redis-server, each on a clock the test moves (passed to the script).
func both(t *testing.T, fn func(t *testing.T, c clocked)) {
	t.Run("local", func(t *testing.T) {
		now := new(time.Time)
		fn(t, clocked{"local", NewLocal(func() time.Time { return *now }), now})
	})
	t.Run("redis", func(t *testing.T) {
		now := new(time.Time)
		fn(t, clocked{"redis", newRedisLimiter(t, testredis.Start(t), now), now})
	})
}

func checks(cs ...policy.Check) policy.Checks {
	var out policy.Checks
	for _, c := range cs {
		out.Add(c)
	}
	return out
}

func quota(name string, n int, cal policy.Calendar) policy.Rate {
	return policy.Rate{Name: name, Limit: n, Period: 24 * time.Hour, Kind: policy.Quota, Calendar: cal}
}

func sliding(name string, n int, w time.Duration) policy.Rate {
	return policy.Rate{Name: name, Limit: n, Period: w, Kind: policy.Sliding}
}

func TestCalendarWindow(t *testing.T) {
	at := time.Date(2024, 2, 29, 23, 59, 59, 0, time.UTC)
	for _, tc := range []struct {
		cal        policy.Calendar
		start, end time.Time
	}{
		{policy.Calendar{Days: 1}, time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC), time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC)},
		{policy.Calendar{Month: true}, time.Date(2024, 2, 1, 0, 0, 0, 0, time.UTC), time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC)},
		// 19782 days since 1970-01-01: the 7-day span from day 19782 (a Thursday).
		{policy.Calendar{Days: 7}, time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC), time.Date(2024, 3, 7, 0, 0, 0, 0, time.UTC)},
	} {
		s, e := tc.cal.Window(at)
		if !s.Equal(tc.start) || !e.Equal(tc.end) {
			t.Errorf("%+v: %v-%v, want %v-%v", tc.cal, s, e, tc.start, tc.end)
		}
	}
}

// TestScriptCalendar: the script's windows (Redis's calendar arithmetic)
// are Go's, every day from 1999 to 2101 and around every month's turn.
func TestScriptCalendar(t *testing.T) {
	rs := testredis.Start(t)
	var now time.Time
	r := newRedisLimiter(t, rs, &now)
	cals := []policy.Calendar{{Month: true}, {Days: 1}, {Days: 30}, {Days: 366}}
	day := time.Date(1999, 12, 31, 0, 0, 0, 0, time.UTC)
	// Every calendar in one charge (a check each): one script run a time.
	var cs policy.Checks
	for i, cal := range cals {
		rt := quota("q", 1, cal)
		rt.Shadow = true // only read, never charge
		cs.Add(policy.Check{Key: "cal" + strconv.Itoa(i), Rate: rt})
	}
	for i := 0; day.Year() < 2101; i++ {
		for _, off := range []time.Duration{0, 24*time.Hour - time.Millisecond} {
			now = day.Add(off)
			d, err := r.Charge(cs)
			if err != nil {
				t.Fatal(err)
			}
			for j, cal := range cals {
				s, e := cal.Window(now)
				res := d.Results[j]
				if res.start != s.Unix() || res.Window != e.Sub(s) || res.ResetAfter != e.Sub(now) {
					t.Fatalf("%v %+v: script window %d+%v reset %v, Go's %v-%v", now, cal, res.start, res.Window, res.ResetAfter, s, e)
				}
			}
			r.Refund(cs, d)
		}
		day = day.AddDate(0, 0, 1+rand.IntN(20))
	}
}

func TestQuota(t *testing.T) {
	both(t, func(t *testing.T, c clocked) {
		*c.now = time.Date(2026, 3, 31, 23, 0, 0, 0, time.UTC)
		day := checks(policy.Check{Key: "vg:{v:a}:orders-day", Rate: quota("orders-day", 3, policy.Calendar{Days: 1})})
		for i := 0; i < 3; i++ {
			d, err := c.l.Charge(day)
			if err != nil || !d.Allowed || d.Results[0].Remaining != 2-i {
				t.Fatalf("request %d: %+v %v", i, d, err)
			}
			if rem, reset := d.Left(0); rem != 2-i || reset != time.Hour {
				t.Fatalf("request %d: left %d, %v", i, rem, reset)
			}
		}
		*c.now = c.now.Add(59*time.Minute + 59*time.Second)
		d, err := c.l.Charge(day)
		if err != nil || d.Allowed || d.RetryAfter != time.Second || d.Results[0].Used != 3 {
			t.Fatalf("past the quota: %+v %v", d, err)
		}
		// The day turns: a new counter.
		*c.now = c.now.Add(time.Second)
		if d, err := c.l.Charge(day); err != nil || !d.Allowed || d.Results[0].Used != 1 || d.Results[0].Window != 24*time.Hour {
			t.Fatalf("next day: %+v %v", d, err)
		}
		used, start, _, err := c.l.Used("vg:{v:a}:orders-day", day.List[0].Rate)
		if c.name == "local" && (err != nil || used != 1 || !start.Equal(*c.now)) {
			t.Fatalf("used %d from %v: %v", used, start, err)
		}
	})
}

// TestSliding: at most q in any w: a request leaves the window w after it
// was admitted, not at a turn.
func TestSliding(t *testing.T) {
	both(t, func(t *testing.T, c clocked) {
		t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
		*c.now = t0
		cs := checks(policy.Check{Key: "vg:{v:a}:reads-strict", Rate: sliding("reads-strict", 3, 10*time.Second)})
		for i := 0; i < 3; i++ {
			*c.now = t0.Add(time.Duration(i) * time.Second)
			if d, err := c.l.Charge(cs); err != nil || !d.Allowed {
				t.Fatalf("request %d: %+v %v", i, d, err)
			}
		}
		*c.now = t0.Add(5 * time.Second)
		d, err := c.l.Charge(cs)
		if err != nil || d.Allowed || d.RetryAfter != 5*time.Second || d.Results[0].ResetAfter != 7*time.Second {
			t.Fatalf("fourth in 10 s: %+v %v", d, err)
		}
		// Just before the first leaves: still refused; at t0+10s it has left.
		*c.now = t0.Add(10*time.Second - time.Millisecond)
		if d, _ := c.l.Charge(cs); d.Allowed || d.RetryAfter != time.Millisecond {
			t.Fatalf("at 9.999 s: %+v", d)
		}
		*c.now = t0.Add(10 * time.Second)
		if d, _ := c.l.Charge(cs); !d.Allowed || d.Results[0].Remaining != 0 {
			t.Fatalf("at 10 s: %+v", d)
		}
		// 1 s, 2 s and 10 s are in the window now: the next fits when 1 s
		// leaves it, at 11 s.
		*c.now = t0.Add(10*time.Second + time.Millisecond)
		if d, _ := c.l.Charge(cs); d.Allowed || d.RetryAfter != time.Second-time.Millisecond {
			t.Fatalf("at 10.001 s: %+v", d)
		}
	})
}

// TestAllOrNothing: a check that refuses leaves the others uncharged, and
// a Refund gives back exactly what a Charge took, in the window it was
// charged in even after the window turned.
func TestAllOrNothing(t *testing.T) {
	both(t, func(t *testing.T, c clocked) {
		*c.now = time.Date(2026, 5, 31, 23, 59, 59, 0, time.UTC)
		month := policy.Check{Key: "vg:{v:a}:month", Rate: quota("month", 10, policy.Calendar{Month: true})}
		strict := policy.Check{Key: "vg:{v:a}:strict", Rate: sliding("strict", 1, time.Minute)}
		cs := checks(month, strict)
		if d, err := c.l.Charge(cs); err != nil || !d.Allowed {
			t.Fatalf("%+v %v", d, err)
		}
		d, err := c.l.Charge(cs)
		if err != nil || d.Allowed || !d.Results[0].Allowed || d.Results[1].Allowed || d.Results[0].charged {
			t.Fatalf("refused by strict: %+v %v", d, err)
		}
		if rem, _ := d.Left(0); rem != 9 {
			t.Fatalf("month left %d after a refusal, want 9", rem)
		}
		// Only the month: charged, then refunded (another limit refused).
		alone := checks(month)
		d, _ = c.l.Charge(alone)
		if d.Results[0].Used != 2 {
			t.Fatalf("%+v", d)
		}
		*c.now = c.now.Add(2 * time.Second) // June now: the refund goes to May
		d = c.l.Refund(alone, d)
		if rem, _ := d.Left(0); rem != 9 {
			t.Fatalf("left %d after the refund", rem)
		}
		d = c.l.Refund(alone, d) // a second Refund of the same decision takes nothing
		d, _ = c.l.Charge(alone)
		if d.Results[0].Used != 1 {
			t.Fatalf("June's first: %+v", d)
		}
		*c.now = c.now.Add(-2 * time.Second)
		if d, _ := c.l.Charge(alone); d.Results[0].Used != 2 {
			t.Fatalf("May after the refund: used %d, want 2 (1 charged, 1 refunded, this one)", d.Results[0].Used)
		}
	})
}

// TestShadowNeverRefuses: a shadow check over its limit does not refuse
// and is not charged; the enforced checks are.
func TestShadowNeverRefuses(t *testing.T) {
	both(t, func(t *testing.T, c clocked) {
		*c.now = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		sh := quota("try", 1, policy.Calendar{Days: 1})
		sh.Shadow = true
		cs := checks(policy.Check{Key: "k:try", Rate: sh}, policy.Check{Key: "k:en", Rate: quota("en", 5, policy.Calendar{Days: 1})})
		for i := 0; i < 3; i++ {
			d, err := c.l.Charge(cs)
			if err != nil || !d.Allowed || d.Results[0].Allowed != (i == 0) || d.Results[0].Used != 1 || d.Results[1].Used != i+1 {
				t.Fatalf("request %d: %+v %v", i, d, err)
			}
		}
	})
}

// TestRedisDown: a call that fails is ErrUnavailable, never a decision.
func TestRedisDown(t *testing.T) {
	rs := testredis.Start(t)
	r := newRedisLimiter(t, rs, nil)
	cs := checks(policy.Check{Key: "k", Rate: quota("q", 5, policy.Calendar{Days: 1})})
	if _, err := r.Charge(cs); err != nil {
		t.Fatal(err)
	}
	rs.Stop()
	if d, err := r.Charge(cs); !errors.Is(err, ErrUnavailable) || d.Allowed {
		t.Fatalf("%+v %v", d, err)
	}
	down := newRedisLimiter(t, testredis.Start(t), nil)
	down.o.Down = func() bool { return true }
	if _, err := down.Charge(cs); !errors.Is(err, ErrUnavailable) {
		t.Fatal(err)
	}
}

// TestRedisMatchesLocal: random requests on random clocks get the same
// decisions from both.
func TestRedisMatchesLocal(t *testing.T) {
	var now time.Time
	r := newRedisLimiter(t, testredis.Start(t), &now)
	l := NewLocal(func() time.Time { return now })
	rates := []policy.Check{
		{Key: "a:s", Rate: sliding("s", 5, 3*time.Second)},
		{Key: "a:d", Rate: quota("d", 20, policy.Calendar{Days: 1})},
		{Key: "a:m", Rate: quota("m", 40, policy.Calendar{Month: true})},
	}
	now = time.Date(2026, 1, 31, 23, 59, 0, 0, time.UTC)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 2000; i++ {
		now = now.Add(time.Duration(rng.IntN(300)) * time.Millisecond)
		var cs policy.Checks
		for _, c := range rates {
			if rng.IntN(2) == 0 {
				cs.Add(c)
			}
		}
		dr, err := r.Charge(cs)
		if err != nil {
			t.Fatal(err)
		}
		dl, _ := l.Charge(cs)
		refund := rng.IntN(4) == 0
		if refund {
			dr = r.Refund(cs, dr)
			dl = l.Refund(cs, dl)
		}
		dr.id = ""
		for i := range dl.Results {
			if cs.List[i].Rate.Kind == policy.Sliding {
				dl.Results[i].start = 0 // Local's own mark of the entry
			}
		}
		if dr != dl {
			t.Fatalf("request %d at %v: redis %+v, local %+v", i, now, dr, dl)
		}
	}
}

// TestCluster: in a Redis Cluster the script's keys, the quota counters
// it names from a bucket's name included, are in the bucket's slot (its
// vendor's hash tag), so a quota and a sliding window decide and refund
// there as on one server.
func TestCluster(t *testing.T) {
	cl := testredis.StartCluster(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	r, err := NewRedis(RedisOptions{Client: c, Conn: transport(t, c, 2*time.Second), Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for v := 0; v < 20; v++ { // vendors on every node
		vendor := "vg:{v:" + strconv.Itoa(v) + "}:"
		cs := checks(policy.Check{Key: vendor + "day", Rate: quota("day", 2, policy.Calendar{Days: 1})},
			policy.Check{Key: vendor + "strict", Rate: sliding("strict", 5, time.Minute)})
		for i := 0; i < 4; i++ {
			d, err := r.Charge(cs)
			if err != nil {
				t.Fatalf("vendor %d request %d: %v", v, i, err)
			}
			if d.Allowed != (i < 3) { // 2 a day, one given back
				t.Fatalf("vendor %d request %d: %+v", v, i, d)
			}
			if i == 1 {
				d = r.Refund(cs, d) // given back: the third fits
				if d.Results[0].Used != 1 {
					t.Fatalf("vendor %d: refunded %+v", v, d)
				}
			}
		}
		if used, _, _, err := r.Used(vendor+"day", cs.List[0].Rate); err != nil || used != 2 {
			t.Fatalf("vendor %d: used %d, %v", v, used, err)
		}
	}
}

// TestLocalForgets: the in-process limiter keeps live buckets only: a
// sliding bucket whose requests have all left its window, and a quota
// window an hour past its end, are forgotten by the next sweep.
func TestLocalForgets(t *testing.T) {
	now := time.Date(2026, 1, 1, 23, 0, 0, 0, time.UTC)
	l := NewLocal(func() time.Time { return now })
	for v := 0; v < 100; v++ {
		vendor := "vg:{v:" + strconv.Itoa(v) + "}:"
		if _, err := l.Charge(checks(policy.Check{Key: vendor + "s", Rate: sliding("s", 5, time.Minute)},
			policy.Check{Key: vendor + "d", Rate: quota("d", 5, policy.Calendar{Days: 1})})); err != nil {
			t.Fatal(err)
		}
	}
	if len(l.sliding) != 100 || len(l.quotas) != 100 {
		t.Fatalf("%d sliding, %d quotas", len(l.sliding), len(l.quotas))
	}
	now = now.Add(2*time.Hour + time.Second) // the day ended more than an hour ago
	if _, err := l.Charge(checks(policy.Check{Key: "other", Rate: sliding("s", 5, time.Minute)})); err != nil {
		t.Fatal(err)
	}
	if len(l.sliding) != 1 || len(l.quotas) != 0 {
		t.Fatalf("after the sweep: %d sliding, %d quotas, want 1 and 0", len(l.sliding), len(l.quotas))
	}
}

// transport is the rate limiter's transport over c, as the gateway passes
// it to this limiter: pipelined, timeout a caller's wait on a silent
// Redis, config's defaults otherwise. Made before c dials (it watches c's
// connections); closed when the test ends.
func transport(t testing.TB, c redis.UniversalClient, timeout time.Duration) *redisconn.Conn {
	t.Helper()
	d := config.DefaultGateway().Redis
	h, err := redisconn.NewHealth(redisconn.HealthOptions{BreakerOpenFor: d.BreakerOpenFor, BreakerFailures: d.BreakerFailures,
		BreakerWindow: d.BreakerWindow, BreakerFailureRatio: float64(d.BreakerFailurePercent) / 100})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := redisconn.New(redisconn.Options{Client: c, Script: redis.NewScript("return 0"), Timeout: timeout,
		WireTimeout: max(d.WireTimeout, timeout), BusyTimeout: max(d.BusyTimeout, timeout), Pipeline: true,
		PipelineMax: d.PipelineMax, PipelineSenders: d.PipelineSenders, TickSlack: d.TickSlack}, h, redisconn.SystemClock{Epoch: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	return conn
}

// An exact quota's refund sent twice (its answer lost and the call sent
// again, as a Redis Cluster client does after a node's timeout) takes
// back one charge, not two: the quota is never lifted by a resend.
func TestQuotaRefundSentTwiceCountsOnce(t *testing.T) {
	rs := testredis.Start(t)
	info := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	t.Cleanup(func() { info.Close() })
	now := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	l := newRedisLimiter(t, rs, &now)
	const bucket = "vg:{v:refund}:day"
	cs := checks(policy.Check{Key: bucket, Rate: quota("day", 10, policy.Calendar{Days: 1})})
	var last Decision
	for range 3 {
		d, err := l.Charge(cs)
		if err != nil || !d.Allowed {
			t.Fatalf("charge: %v", err)
		}
		last = d
	}
	counter := keyPrefix + quotaKey(bucket, last.Results[0].start)
	for range 2 { // the refund's call, sent twice
		call, ks, as, err := l.call(1, 2)
		if err != nil {
			t.Fatal(err)
		}
		ks[0], as[0], as[1] = counter, last.id, "q"
		if _, err := l.run(call, refundScript, ks, as); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := info.Get(context.Background(), counter).Int(); err != nil || n != 2 {
		t.Fatalf("the counter holds %d (%v) after 3 charges and one refund sent twice, want 2", n, err)
	}
}
