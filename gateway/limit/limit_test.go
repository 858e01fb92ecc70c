package limit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"vendorgate/config"
	"vendorgate/gateway/policy"
	"vendorgate/shared/testredis"
)

func one(key string, r policy.Rate) policy.Checks {
	var cs policy.Checks
	cs.Add(policy.Check{Key: key, Rate: r})
	return cs
}

func TestLocalGCRA(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	l := NewLocal(LocalOptions{Now: func() time.Time { return now }})
	r := policy.Rate{Name: "reads", Limit: 120, Period: time.Minute}
	for i := 0; i < 120; i++ {
		d, _ := l.Allow(one("v", r))
		if !d.Allowed || d.Results[0].Remaining != 119-i {
			t.Fatalf("request %d: %+v", i, d)
		}
	}
	d, _ := l.Allow(one("v", r))
	if d.Allowed || d.RetryAfter != 500*time.Millisecond || d.Results[0].ResetAfter != time.Minute {
		t.Fatalf("121st: %+v", d)
	}
	now = now.Add(500 * time.Millisecond)
	if d, _ := l.Allow(one("v", r)); !d.Allowed || d.Results[0].Remaining != 0 {
		t.Fatalf("after one emission interval: %+v", d)
	}
	now = now.Add(2 * time.Minute)
	l.Allow(one("other", r))
	for i := 0; i < 2048; i++ { // sweeps drop whole buckets
		l.Allow(one("other", r))
		now = now.Add(time.Second)
	}
	if l.Len() > 2 {
		t.Fatalf("%d buckets kept", l.Len())
	}
}

func TestLocalAllOrNothing(t *testing.T) {
	l := NewLocal(LocalOptions{})
	vendor := policy.Rate{Name: "reads", Limit: 10, Period: time.Minute}
	key := policy.Rate{Name: "key-reads", Limit: 1, Period: time.Minute}
	var cs policy.Checks
	cs.Add(policy.Check{Key: "v", Rate: vendor})
	cs.Add(policy.Check{Key: "v:k", Rate: key})
	if d, _ := l.Allow(cs); !d.Allowed {
		t.Fatal(d)
	}
	if d, _ := l.Allow(cs); d.Allowed || d.Results[0].Allowed != true || d.Results[1].Allowed {
		t.Fatalf("%+v", d)
	}
	// The refused request did not charge the vendor: 9 left then 8.
	if d, _ := l.Allow(one("v", vendor)); d.Results[0].Remaining != 8 {
		t.Fatalf("%+v", d)
	}
}

// TestDecideIntoUsedDecision decides into one Decision over and over, as
// a caller may into a reused one: a refusal (its RetryAfter, a shadow
// refusal, a refund's receipt) must leave nothing behind in the next
// answer's checks, which read as a fresh Decision's would.
func TestDecideIntoUsedDecision(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	used, fresh := newLocal(clock), newLocal(clock)
	key := policy.Rate{Name: "key", Limit: 1, Period: time.Minute, Refund: true}
	shadow := policy.Rate{Name: "shadow", Limit: 1, Period: time.Minute, Shadow: true}
	vendor := policy.Rate{Name: "vendor", Limit: 100, Period: time.Minute}
	var d Decision
	for i, cs := range []policy.Checks{
		checksOf(policy.Check{Key: "k", Rate: key}, policy.Check{Key: "s", Rate: shadow}),
		checksOf(policy.Check{Key: "k", Rate: key}, policy.Check{Key: "s", Rate: shadow}), // refused, shadow refused
		checksOf(policy.Check{Key: "v", Rate: vendor}),
		checksOf(policy.Check{Key: "k2", Rate: key}, policy.Check{Key: "v", Rate: vendor}),
	} {
		if err := used.Decide(&cs, &d); err != nil {
			t.Fatal(err)
		}
		want, _ := fresh.Allow(cs)
		n := cs.Count // results past the checks' count are not read
		if d.Allowed != want.Allowed || d.RetryAfter != want.RetryAfter || d.ShadowDenied != want.ShadowDenied || d.Count != want.Count ||
			!slices.Equal(d.Results[:n], want.Results[:n]) || !slices.Equal(d.receipts[:n], want.receipts[:n]) {
			t.Fatalf("decision %d into a used Decision:\n%+v\nwant, as into a fresh one:\n%+v", i, d, want)
		}
	}
}

func checksOf(c ...policy.Check) policy.Checks {
	var cs policy.Checks
	for _, x := range c {
		cs.Add(x)
	}
	return cs
}

// withDefaults is o with config's default for every setting o leaves zero
// (the limiter has none of its own), and the wire and busy bounds at least
// the timeout, as the gateway passes them. A test that names no LeaseMax
// means no leases: 1.
func withDefaults(o RedisOptions) RedisOptions {
	d := config.DefaultGateway().Redis
	set := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	set(&o.Timeout, d.Timeout)
	set(&o.WireTimeout, d.WireTimeout)
	set(&o.BusyTimeout, d.BusyTimeout)
	set(&o.BreakerOpenFor, d.BreakerOpenFor)
	set(&o.BreakerWindow, d.BreakerWindow)
	set(&o.LeaseTTL, d.LeaseTTL)
	set(&o.TickSlack, d.TickSlack)
	o.WireTimeout = max(o.WireTimeout, o.Timeout)
	o.BusyTimeout = max(o.BusyTimeout, o.Timeout)
	if o.BreakerFailures == 0 {
		o.BreakerFailures = d.BreakerFailures
	}
	if o.BreakerFailureRatio == 0 {
		o.BreakerFailureRatio = float64(d.BreakerFailurePercent) / 100
	}
	if o.PipelineMax == 0 {
		o.PipelineMax = d.PipelineMax
	}
	if o.PipelineSenders == 0 {
		o.PipelineSenders = d.PipelineSenders
	}
	if o.LeaseMax == 0 {
		o.LeaseMax = 1
	}
	return o
}

func newRedisOpts(t testing.TB, rs *testredis.Server, calls *atomic.Int64, pipeline bool) *Redis {
	c := redis.NewClient(&redis.Options{Addr: rs.Addr(), MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true,
		DialTimeout: 100 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	clk := newTestClock(0)
	c.AddHook(answered{clk.kick}) // each command answered kicks the clock's kick
	// A 250ms wire deadline: a node that runs late (a loaded test machine)
	// leaves a silent Redis' verdict to it, within the tests' 500ms bounds.
	r, err := NewRedis(withDefaults(RedisOptions{Client: c, Timeout: 50 * time.Millisecond, WireTimeout: 250 * time.Millisecond,
		BreakerOpenFor: 200 * time.Millisecond, Pipeline: pipeline, Clock: clk, ObserveCall: func(time.Duration, error) {
			if calls != nil {
				calls.Add(1)
			}
		}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// bothModes runs fn with and without pipelining.
func bothModes(t *testing.T, fn func(t *testing.T, pipeline bool)) {
	for _, p := range []bool{false, true} {
		name := "alone"
		if p {
			name = "pipelined"
		}
		t.Run(name, func(t *testing.T) { fn(t, p) })
	}
}

// TestRedisMatchesLocal: the same sequence gives the same decisions.
func TestRedisMatchesLocal(t *testing.T) { bothModes(t, testRedisMatchesLocal) }

func testRedisMatchesLocal(t *testing.T, pipeline bool) {
	rs := testredis.Start(t)
	var calls atomic.Int64
	r := newRedisOpts(t, rs, &calls, pipeline)
	l := NewLocal(LocalOptions{})
	vendor := policy.Rate{Name: "reads", Limit: 5, Period: time.Minute}
	key := policy.Rate{Name: "key-reads", Limit: 3, Period: time.Minute}
	for _, multi := range []bool{false, true} {
		prefix := "single"
		if multi {
			prefix = "multi"
		}
		var cs policy.Checks
		cs.Add(policy.Check{Key: "vg:{v:" + prefix + "}:reads", Rate: vendor})
		if multi {
			cs.Add(policy.Check{Key: "vg:{v:" + prefix + "}:k:1:reads", Rate: key})
		}
		for i := 0; i < 7; i++ {
			dr, err := r.Allow(cs)
			if err != nil {
				t.Fatal(err)
			}
			dl, _ := l.Allow(cs)
			if dr.Allowed != dl.Allowed || dr.Count != dl.Count {
				t.Fatalf("%s %d: redis %+v local %+v", prefix, i, dr, dl)
			}
			for j := 0; j < dl.Count; j++ {
				if !dr.Results[j].Known { // a remembered denial answered without asking Redis
					continue
				}
				if dr.Results[j].Allowed != dl.Results[j].Allowed || dr.Results[j].Remaining != dl.Results[j].Remaining {
					t.Fatalf("%s %d/%d: redis %+v local %+v", prefix, i, j, dr.Results[j], dl.Results[j])
				}
			}
			if !dr.Allowed && (dr.RetryAfter <= 0 || dr.RetryAfter > 20*time.Second) {
				t.Fatalf("retry after %s", dr.RetryAfter)
			}
		}
	}
	// A remembered denial costs no Redis call.
	before := calls.Load()
	d, err := r.Allow(one("vg:{v:single}:reads", vendor))
	if err != nil || d.Allowed || calls.Load() != before {
		t.Fatalf("denial not remembered: %+v %v, %d calls", d, err, calls.Load()-before)
	}
}

func TestRedisUnavailableAndBreaker(t *testing.T) { bothModes(t, testRedisUnavailableAndBreaker) }

func testRedisUnavailableAndBreaker(t *testing.T, pipeline bool) {
	rs := testredis.Start(t)
	var calls atomic.Int64
	r := newRedisOpts(t, rs, &calls, pipeline)
	rate := policy.Rate{Name: "reads", Limit: 100, Period: time.Minute}
	if _, err := r.Allow(one("a", rate)); err != nil {
		t.Fatal(err)
	}
	rs.Pause()
	defer rs.Resume()
	// Each call fails closed within its timeout (or the wire deadline, on a
	// node that runs late); the breaker opens once enough round trips
	// failed (on the wire, when pipelined: 250ms each).
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; r.State() != gobreaker.StateOpen; i++ {
		start := time.Now()
		if _, err := r.Allow(one("a", rate)); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("paused Redis: %v", err)
		}
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Fatalf("took %s past a 50ms timeout", d)
		}
		if time.Now().After(deadline) {
			t.Fatalf("breaker still %s after %d calls", r.State(), i+1)
		}
	}
	before := calls.Load()
	if _, err := r.Allow(one("a", rate)); !errors.Is(err, ErrUnavailable) || calls.Load() != before {
		t.Fatalf("open breaker called Redis: %v", err)
	}
}

func BenchmarkLocal(b *testing.B) {
	l := NewLocal(LocalOptions{})
	cs := one("vg:{v:bench}:reads", policy.Rate{Name: "reads", Limit: 1 << 30, Period: time.Second})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if d, _ := l.Allow(cs); !d.Allowed {
				b.Fatal("denied")
			}
		}
	})
}

func BenchmarkRedis(b *testing.B) {
	for _, p := range []bool{false, true} {
		name := "alone"
		if p {
			name = "pipelined"
		}
		b.Run(name, func(b *testing.B) { benchRedis(b, p) })
	}
}

func benchRedis(b *testing.B, pipeline bool) {
	rs := testredis.Start(b)
	r := newPatientRedis(b, rs, time.Second, pipeline) // a cold pool under RunParallel dials many connections at once
	for _, multi := range []bool{false, true} {
		name := "one-limit"
		cs := one("vg:{v:bench}:reads", policy.Rate{Name: "reads", Limit: 1 << 30, Period: time.Second})
		if multi {
			name = "two-limits"
			cs.Add(policy.Check{Key: "vg:{v:bench}:k:1:reads", Rate: policy.Rate{Name: "key-reads", Limit: 1 << 30, Period: time.Second}})
		}
		for _, par := range []int{1, 16} {
			// par 16 runs 16 callers per CPU: concurrent requests, what
			// pipelining is for.
			b.Run(fmt.Sprintf("%s/callers-x%d", name, par), func(b *testing.B) {
				b.ReportAllocs()
				b.SetParallelism(par)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := r.Allow(cs); err != nil {
							b.Fatal(err)
						}
					}
				})
			})
		}
	}
}

// A request under more than two limits (vendor and key limits with shadow
// twins) is checked under the locks of all its buckets: concurrent
// requests neither race on a shard's map nor over-admit.
func TestLocalManyChecksConcurrent(t *testing.T) {
	l := NewLocal(LocalOptions{})
	vendor := policy.Rate{Name: "reads", Limit: 100, Period: time.Hour}
	var cs policy.Checks
	cs.Add(policy.Check{Key: "vg:{v:1}:reads", Rate: vendor})
	cs.Add(policy.Check{Key: "vg:{v:1}:reads:twin", Rate: policy.Rate{Name: "reads", Limit: 1000, Period: time.Hour, Shadow: true}, Twin: true})
	cs.Add(policy.Check{Key: "vg:{v:1}:k:1:reads", Rate: policy.Rate{Name: "key-reads", Limit: 1000, Period: time.Hour}})
	cs.Add(policy.Check{Key: "vg:{v:1}:k:1:reads:twin", Rate: policy.Rate{Name: "key-reads", Limit: 1000, Period: time.Hour, Shadow: true}, Twin: true})
	var allowed atomic.Int64
	done := make(chan struct{})
	for g := 0; g < 8; g++ {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := 0; i < 50; i++ {
				if d, _ := l.Allow(cs); d.Allowed {
					allowed.Add(1)
				}
			}
		}()
	}
	for g := 0; g < 8; g++ {
		<-done
	}
	if n := allowed.Load(); n != 100 {
		t.Fatalf("%d of 400 concurrent requests allowed under a limit of 100", n)
	}
}

// TestPoolWaitIsNotAFailure: a limiter call that gets no connection of its
// client's pool in time (every connection in use by this gateway) asked
// Redis nothing: it fails as this gateway's overload (ErrBusy), never as
// Redis failing, so that however many such calls there are the breaker
// stays closed and no failure is counted; with a connection free again,
// the next call is decided.
func TestPoolWaitIsNotAFailure(t *testing.T) { bothModes(t, testPoolWaitIsNotAFailure) }

func testPoolWaitIsNotAFailure(t *testing.T, pipeline bool) {
	rs := testredis.Start(t)
	c := redis.NewClient(&redis.Options{Addr: rs.Addr(), MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true,
		DialTimeout: 100 * time.Millisecond, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
		PoolSize: 1, PoolTimeout: 20 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	var failures atomic.Int64
	// A call's timeout well past the pool's 20ms wait, whose verdict is the
	// subject: on a loaded node a lone call (not pipelined) bounded by 50ms
	// of wall clock could time out dialling or writing before its pool
	// wait was even asked (2 of 40 runs under two busy loops).
	r, err := NewRedis(withDefaults(RedisOptions{Client: c, Timeout: time.Second, BreakerOpenFor: time.Minute, BreakerFailures: 3,
		Pipeline: pipeline, OnFailure: func(FailureKind, error) { failures.Add(1) }}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	rate := policy.Rate{Name: "reads", Limit: 100, Period: time.Minute}
	if _, err := r.Allow(one("a", rate)); err != nil {
		t.Fatal(err)
	}
	// A connection of its own holds the pool's one, answered (a request
	// left unanswered would be Redis' silence to the transport's evidence).
	held := c.Conn()
	if err := held.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if s := c.PoolStats(); s.TotalConns != 1 || s.IdleConns != 0 {
		t.Fatalf("pool %+v, want its one connection in use", s)
	}
	for i := 0; i < 10; i++ {
		if _, err := r.Allow(one("a", rate)); !errors.Is(err, ErrBusy) || errors.Is(err, ErrUnavailable) || !errors.Is(err, redis.ErrPoolTimeout) {
			t.Fatalf("call %d with the pool's connection in use: %v, want ErrBusy of a pool timeout", i+1, err)
		}
	}
	if st, n := r.State(), failures.Load(); st != gobreaker.StateClosed || n != 0 {
		t.Fatalf("after 10 calls that got no connection: breaker %s, %d failures counted; want closed, none", st, n)
	}
	if err := held.Close(); err != nil {
		t.Fatal(err)
	}
	if d, err := r.Allow(one("a", rate)); err != nil || !d.Allowed {
		t.Fatalf("with the connection free again: %+v %v", d, err)
	}
}

// TestNewRedisRefusesZeros: the limiter fills in no default of its own
// (config holds them): a setting it needs left zero is refused, and so is
// a reload to lease settings it cannot use.
func TestNewRedisRefusesZeros(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	good := withDefaults(RedisOptions{Client: c, Pipeline: true})
	for name, zero := range map[string]func(o *RedisOptions){
		"timeout":         func(o *RedisOptions) { o.Timeout = 0 },
		"wire timeout":    func(o *RedisOptions) { o.WireTimeout = 0 },
		"busy timeout":    func(o *RedisOptions) { o.BusyTimeout = 0 },
		"breaker open":    func(o *RedisOptions) { o.BreakerOpenFor = 0 },
		"breaker fails":   func(o *RedisOptions) { o.BreakerFailures = 0 },
		"breaker window":  func(o *RedisOptions) { o.BreakerWindow = 0 },
		"breaker ratio":   func(o *RedisOptions) { o.BreakerFailureRatio = 0 },
		"pipeline max":    func(o *RedisOptions) { o.PipelineMax = 0 },
		"senders":         func(o *RedisOptions) { o.PipelineSenders = 0 },
		"lease max":       func(o *RedisOptions) { o.LeaseMax = 0 },
		"lease ttl":       func(o *RedisOptions) { o.LeaseTTL = 0 },
		"wire below time": func(o *RedisOptions) { o.WireTimeout = o.Timeout / 2 },
	} {
		o := good
		zero(&o)
		if r, err := NewRedis(o); err == nil {
			r.Close()
			t.Errorf("%s: accepted", name)
		}
	}
	r, err := NewRedis(good)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.SetLeases(0, time.Second); err == nil {
		t.Error("SetLeases accepted lease max 0")
	}
	if err := r.SetLeases(16, 0); err == nil {
		t.Error("SetLeases accepted lease ttl 0")
	}
	if err := r.SetLeases(16, 2*time.Second); err != nil {
		t.Error(err)
	}
}
