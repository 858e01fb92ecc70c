package limit

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"vendorgate/gateway/limit/redisconn"
	"vendorgate/gateway/policy"
	"vendorgate/shared/testredis"
)

// busyLimiter is a pipelined limiter as the gateway builds it (50ms
// timeout, the default wire and busy bounds), counting its failed round
// trips (each kicks its clock's kick) and the calls given up before they
// were sent. Its clock tells armed of each caller's wait begun.
func busyLimiter(t *testing.T, rs *testredis.Server, o RedisOptions) (r *Redis, failures, unsent *atomic.Int64) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: rs.Addr(), MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true,
		DialTimeout: 100 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	failures, unsent = new(atomic.Int64), new(atomic.Int64)
	o.Client, o.Pipeline = c, true
	if o.Timeout == 0 {
		o.Timeout = 50 * time.Millisecond
	}
	clk := newTestClock(o.Timeout)
	o.OnFailure = func(FailureKind, error) { failures.Add(1); clk.kick.fire() }
	o.OnUnsent = func() { unsent.Add(1) }
	r, err := newRedis(withDefaults(o), clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r, failures, unsent
}

// testClock is the system's clock but for the transport's timers (a
// caller's wait, the on-time probe): they fire late by late, as on a node
// that gets its cores late, and each armed for the transport's timeout (a
// caller's wait begun, its call queued) is told to armed. A test may move
// it on (ahead: see silence), and is told of every transport timer armed
// (ticked: the on-time probe's every wake among them) and of every beat of
// the lease loop that ended (beats, and kick: which the test's hooks of
// the limiter kick too).
type testClock struct {
	systemClock
	late    *atomic.Int64
	ahead   *atomic.Int64 // ns it reads past the system's clock
	timeout time.Duration
	armed   chan struct{}
	ticked  kick
	kick    kick
	beats   *atomic.Int64
}

// newTestClock is a clock on time, telling armed of the waits of timeout
// (none when 0).
func newTestClock(timeout time.Duration) testClock {
	return testClock{systemClock: systemClock{redisconn.SystemClock{Epoch: time.Now()}}, late: new(atomic.Int64),
		ahead: new(atomic.Int64), timeout: timeout, armed: make(chan struct{}, 4096), ticked: newKick(), kick: newKick(),
		beats: new(atomic.Int64)}
}

func (c testClock) Nanotime() int64 { return c.systemClock.Nanotime() + c.ahead.Load() }

func (c testClock) AfterFunc(d time.Duration, f func()) func() bool {
	return c.systemClock.AfterFunc(d, func() {
		f()
		c.beats.Add(1)
		c.kick.fire()
	})
}

func (c testClock) NewTimer() redisconn.Timer { return testTimer{c.systemClock.NewTimer(), c} }

type testTimer struct {
	redisconn.Timer
	c testClock
}

func (t testTimer) Reset(d time.Duration) bool {
	if t.c.timeout > 0 && d == t.c.timeout {
		t.c.armed <- struct{}{}
	}
	defer t.c.ticked.fire()
	return t.Timer.Reset(d + time.Duration(t.c.late.Load()))
}

// TestLateNodeHeartbeatLeavesTheVerdictToTheWire: the lease heartbeat
// keeps the rule the requests keep. On a node that runs late, Redis
// paused for 250ms (within the 500ms wire deadline) while leases are held
// and no request comes is not a failure: the heartbeat waits for the wire,
// drops no lease and counts nothing against Redis (it called Redis down
// at its 50ms timeout before, dropping every lease of a Redis the
// requests wait for). Paused for good, the heartbeat's ping fails at the
// wire deadline and is counted.
func TestLateNodeHeartbeatLeavesTheVerdictToTheWire(t *testing.T) {
	rs := testredis.Start(t)
	var granted, dropped atomic.Int64
	r, failures, _ := busyLimiter(t, rs, RedisOptions{LeaseMax: 16, LeaseTTL: 10 * time.Second,
		Leases: LeaseHooks{Granted: func(n int) { granted.Add(int64(n)) }, Dropped: func(n int) { dropped.Add(int64(n)) }}})
	rate := policy.Rate{Name: "reads", Limit: 1_000_000, Period: time.Minute}
	const key = "vg:{v:beat}:reads"
	for i := 0; i < 50; i++ {
		if d, err := r.Allow(one(key, rate)); err != nil || !d.Allowed {
			t.Fatalf("read %d: %+v %v", i, d, err)
		}
	}
	if granted.Load() == 0 {
		t.Fatal("no lease granted for 50 reads of one bucket")
	}
	runLate(t, r)
	clk := r.clock.(testClock)
	for round := 0; round < 3; round++ {
		rs.Pause()
		paused := r.clock.Nanotime()
		// Wall time is what is tested: a heartbeat's ping waits on its
		// socket's deadline, on the wall clock (the limiter's clock does
		// not bound it), and the silence must outlast the 50ms timeout
		// (what the ping waited before) within the 500ms wire deadline. A
		// heartbeat every 25ms while nothing is heard.
		time.Sleep(250 * time.Millisecond)
		rs.Resume()
		// Answering between pauses: a ping sent during the pause answered.
		if !within(5*time.Second, clk.kick, func() bool { return r.pinged.Load() > paused }) {
			t.Fatalf("round %d: no heartbeat of the pause answered within 5s of the resume", round+1)
		}
	}
	// A dropped lease is counted when its bucket is next touched.
	if d, err := r.Allow(one(key, rate)); err != nil || !d.Allowed {
		t.Fatalf("read after the pauses: %+v %v", d, err)
	}
	if failures.Load() != 0 || dropped.Load() != 0 {
		t.Fatalf("Redis paused 250ms on a late node (wire deadline 500ms): %d failures, %d lease tokens dropped", failures.Load(), dropped.Load())
	}
	rs.Pause()
	defer rs.Resume()
	paused := time.Now()
	if !within(5*time.Second, clk.kick, func() bool { return failures.Load() > 0 }) {
		t.Fatal("Redis paused for good: no failed heartbeat within 5s")
	}
	// The 50ms timeout is not the late node's verdict: the 500ms wire is.
	if d := time.Since(paused); d < 400*time.Millisecond {
		t.Fatalf("Redis paused for good on a late node: the heartbeat failed after %s, before the 500ms wire deadline", d)
	}
	if _, err := r.Allow(one(key, rate)); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("read with Redis paused for good: %v, want ErrUnavailable", err)
	}
	if dropped.Load() == 0 {
		t.Fatal("Redis paused for good: the leases were not dropped")
	}
}

// runLate makes r's node run late (the transport's timers, its probe's
// among them, 10ms late) and waits until r no longer counts itself on
// time (checked at each of its timers armed: the probe's wakes).
func runLate(t *testing.T, r *Redis) {
	t.Helper()
	clk := r.clock.(testClock)
	clk.late.Store(int64(10 * time.Millisecond))
	if !within(5*time.Second, clk.ticked, func() bool { return !r.conn.OnTime() }) {
		t.Fatalf("on time with the probe 10ms late (lateness %s)", r.Lateness())
	}
}

// TestShadowLimitHonoursItsOwnLeaseOnceRedisAnswers: a shadow limit
// whose lease at this gateway holds tokens, not honoured because Redis
// had not answered lately (paused, on a late node that waits for it),
// is not counted as refusing when Redis then answers that its bucket is
// spent: the tokens are this gateway's, charged earlier, and are taken
// now that Redis has answered, as an enforced limit's are on the
// request's second pass. (Counted as a refusal before: a shadow limit's
// refusal refuses no request, so it had no second pass, and the usage
// view counted shadow refusals past the lease bound's "tokens held at
// other gateways".)
func TestShadowLimitHonoursItsOwnLeaseOnceRedisAnswers(t *testing.T) {
	rs := testredis.Start(t)
	var dropped atomic.Int64
	r, failures, _ := busyLimiter(t, rs, RedisOptions{LeaseMax: 16, LeaseTTL: 10 * time.Second,
		Leases: LeaseHooks{Dropped: func(n int) { dropped.Add(int64(n)) }}})
	c := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	t.Cleanup(func() { c.Close() })
	const reads, twin = "vg:{v:shadow}:reads", "vg:{v:shadow}:reads:twin"
	var cs policy.Checks
	cs.Add(policy.Check{Key: reads, Rate: policy.Rate{Name: "reads", Limit: 1_000_000, Period: time.Minute}})
	cs.Add(policy.Check{Key: twin, Rate: policy.Rate{Name: "reads", Limit: 1_000_000, Period: time.Minute, Shadow: true}, Twin: true})
	for i := 0; i < 50; i++ {
		if d, err := r.Allow(cs); err != nil || !d.Allowed || !d.Results[1].Allowed {
			t.Fatalf("read %d: %+v %v", i, d, err)
		}
	}
	if !r.leases.holds(twin, r.clock.Nanotime()) {
		t.Fatal("no lease of the shadow limit after 50 reads")
	}
	// Other gateways spend the rest of the twin's bucket in Redis.
	if err := c.Set(t.Context(), keyPrefix+twin, storedTAT(t, c, twin)+3600, 0).Err(); err != nil {
		t.Fatal(err)
	}
	runLate(t, r)
	clk := r.clock.(testClock)
	for len(clk.armed) > 0 { // the reads' waits
		<-clk.armed
	}
	// Redis paused, silent past the 50ms timeout on the limiter's clock:
	// the leases are not honoured.
	silence(r, rs.Pause, 100*time.Millisecond)
	decided := make(chan Decision, 1)
	go func() {
		d, err := r.Allow(cs)
		if err != nil {
			t.Error(err)
		}
		decided <- d
	}()
	select {
	case <-clk.armed: // the decision's call queued, waiting on the paused Redis
	case d := <-decided:
		rs.Resume()
		t.Fatalf("decided from the leases with Redis silent past the timeout: allowed %v, %+v", d.Allowed, d.Results[:d.Count])
	}
	rs.Resume()
	d := <-decided
	if failures.Load() != 0 || dropped.Load() != 0 {
		t.Fatalf("Redis paused past the timeout on a late node: %d failures, %d lease tokens dropped", failures.Load(), dropped.Load())
	}
	if !d.Allowed || !d.Results[1].Known || !d.Results[1].Allowed {
		t.Fatalf("the shadow limit refused with a token of its own lease at this gateway: allowed %v, shadow %+v", d.Allowed, d.Results[1])
	}
}
