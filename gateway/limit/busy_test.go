package limit

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"vendorgate/gateway/policy"
	"vendorgate/shared/testredis"
)

// busyLimiter is a pipelined limiter as the gateway builds it (50ms
// timeout, the default wire and busy bounds), counting its failed round
// trips and the calls given up before they were sent.
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
	o.OnFailure = func(FailureKind, error) { failures.Add(1) }
	o.OnUnsent = func() { unsent.Add(1) }
	r, err := NewRedis(withDefaults(o))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r, failures, unsent
}

// TestLateSenderIsNotAFailure: a sender that gets its core 120ms late (a
// busy node: the callers' 50ms pass before their calls are even sent)
// while Redis answers at once. Every caller gets its decision; nothing
// counts against the breaker, which stays closed.
func TestLateSenderIsNotAFailure(t *testing.T) {
	rs := testredis.Start(t)
	r, failures, unsent := busyLimiter(t, rs, RedisOptions{})
	rate := policy.Rate{Name: "reads", Limit: 1_000_000, Period: time.Minute}
	if _, err := r.Allow(one("vg:{v:late}:reads", rate)); err != nil { // connection and script
		t.Fatal(err)
	}
	r.conn.SetBeforeSend(func() { time.Sleep(120 * time.Millisecond) })
	for round := 0; round < 4; round++ {
		concurrently(16, func(i int) {
			d, err := r.Allow(one(fmt.Sprintf("vg:{v:late%d}:reads", i), rate))
			if err != nil || !d.Allowed {
				t.Errorf("round %d caller %d: %+v %v", round, i, d, err)
			}
		})
	}
	if n := failures.Load(); n != 0 {
		t.Errorf("%d round trips counted as failed with Redis answering", n)
	}
	if n := unsent.Load(); n != 0 {
		t.Errorf("%d calls given up before they were sent", n)
	}
	if s := r.State(); s != gobreaker.StateClosed {
		t.Errorf("breaker %s with Redis answering", s)
	}
}

// TestBusyBoundShedsUncharged: a sender later than the busy bound. The
// caller gives up with ErrBusy (an overloaded node), not ErrUnavailable
// (Redis is fine); its call was never sent, so the bucket was not charged,
// and it is counted as given up unsent.
func TestBusyBoundShedsUncharged(t *testing.T) {
	rs := testredis.Start(t)
	r, failures, unsent := busyLimiter(t, rs, RedisOptions{BusyTimeout: 200 * time.Millisecond})
	rate := policy.Rate{Name: "reads", Limit: 10, Period: time.Hour}
	if d, err := r.Allow(one("vg:{v:shed}:reads", rate)); err != nil || d.Results[0].Remaining != 9 {
		t.Fatalf("%+v %v", d, err)
	}
	release := make(chan struct{})
	var held atomic.Bool
	r.conn.SetBeforeSend(func() {
		if held.CompareAndSwap(false, true) {
			<-release
		}
	})
	_, err := r.Allow(one("vg:{v:shed}:reads", rate))
	if !errors.Is(err, ErrBusy) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("past the busy bound: %v, want ErrBusy", err)
	}
	close(release)
	if d, err := r.Allow(one("vg:{v:shed}:reads", rate)); err != nil || d.Results[0].Remaining != 8 {
		t.Fatalf("the shed call was charged: %+v %v", d, err)
	}
	if unsent.Load() != 1 || failures.Load() != 0 {
		t.Fatalf("unsent %d, failures %d; want 1 and 0", unsent.Load(), failures.Load())
	}
}

// TestSilentRedisFailsAtTimeout: a hung Redis (SIGSTOP) fails each caller
// closed within its timeout (and a second look), and the breaker opens
// once enough round trips have failed on the wire.
func TestSilentRedisFailsAtTimeout(t *testing.T) {
	rs := testredis.Start(t)
	r, failures, _ := busyLimiter(t, rs, RedisOptions{WireTimeout: 200 * time.Millisecond})
	rate := policy.Rate{Name: "reads", Limit: 1_000_000, Period: time.Minute}
	if _, err := r.Allow(one("vg:{v:silent}:reads", rate)); err != nil {
		t.Fatal(err)
	}
	rs.Pause()
	defer rs.Resume()
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; r.State() != gobreaker.StateOpen; i++ {
		start := time.Now()
		_, err := r.Allow(one("vg:{v:silent}:reads", rate))
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("call %d to a hung Redis: %v", i, err)
		}
		if d := time.Since(start); d > 500*time.Millisecond { // 50ms timeout; generous for -race
			t.Fatalf("call %d answered after %s", i, d)
		}
		if time.Now().After(deadline) {
			t.Fatalf("breaker still %s after %d failed round trips", r.State(), failures.Load())
		}
	}
	if k := r.health.LastKind(); k != FailTimeout {
		t.Fatalf("last failure kind %q, want %q", k, FailTimeout)
	}
}

// lateNodeLimiter is a pipelined limiter with one sender on a real Redis,
// a 100ms wire deadline, and a count of the failures it reports: the
// setting of the tests of a node that gets to its socket late.
func lateNodeLimiter(t *testing.T) (*Redis, *atomic.Int64) {
	t.Helper()
	rs := testredis.Start(t)
	c := redis.NewClient(&redis.Options{Addr: rs.Addr(), MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true,
		ReadTimeout: 100 * time.Millisecond, WriteTimeout: 100 * time.Millisecond, PoolSize: 4})
	t.Cleanup(func() { c.Close() })
	var failures atomic.Int64
	r, err := NewRedis(withDefaults(RedisOptions{Client: c, Timeout: 50 * time.Millisecond, WireTimeout: 100 * time.Millisecond,
		BusyTimeout: time.Second, Pipeline: true, PipelineSenders: 1,
		OnFailure: func(FailureKind, error) { failures.Add(1) }}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r, &failures
}

// TestReplyReadLateIsTaken: the sender's read runs only after the wire
// deadline passed (a node that did not schedule it), with Redis' reply
// waiting in the socket. Redis answered in time: the reply is taken, not
// thrown away with the connection, and its callers get their decisions;
// the breaker counts nothing, however often it happens. (Before, the
// round trip was lost and its callers refused 503 request_failed: a
// vendor's read failed on a loaded node with its decision in hand.)
func TestReplyReadLateIsTaken(t *testing.T) {
	r, failures := lateNodeLimiter(t)
	var late atomic.Bool
	r.conn.SetBeforeRead(func() {
		if late.Load() {
			time.Sleep(150 * time.Millisecond) // past the 100ms wire deadline
		}
	})
	rate := policy.Rate{Name: "reads", Limit: 1_000_000, Period: time.Minute}
	if _, err := r.Allow(one("vg:{v:rl}:reads", rate)); err != nil {
		t.Fatalf("first call: %v", err)
	}
	late.Store(true)
	for i := 0; i < 5; i++ {
		d, err := r.Allow(one("vg:{v:rl}:reads", rate))
		if err != nil || !d.Allowed {
			t.Fatalf("call %d read late with the reply waiting: allowed %v, %v; want its decision", i, d.Allowed, err)
		}
	}
	late.Store(false)
	if failures.Load() != 0 || r.State() != gobreaker.StateClosed {
		t.Fatalf("%d failures counted, breaker %s", failures.Load(), r.State())
	}
	if _, err := r.Allow(one("vg:{v:rl}:reads", rate)); err != nil {
		t.Fatalf("after the late reads: %v", err)
	}
}

// TestRequestWrittenLateIsNotAFailure: the sender's write runs only after
// the wire deadline passed (a node that did not schedule it), so the
// request is never written and Redis never asked. Its callers fail as an
// overloaded node (ErrBusy), not as a Redis outage, and the breaker counts
// nothing, however often it happens. (Before, the write's i/o timeout was
// a Redis timeout: 503 rate_limit_unavailable, and one failure for the
// breaker each.)
func TestRequestWrittenLateIsNotAFailure(t *testing.T) {
	r, failures := lateNodeLimiter(t)
	var late atomic.Bool
	r.conn.SetBeforeWrite(func() {
		if late.Load() {
			time.Sleep(150 * time.Millisecond) // past the 100ms wire deadline
		}
	})
	rate := policy.Rate{Name: "reads", Limit: 1_000_000, Period: time.Minute}
	if _, err := r.Allow(one("vg:{v:wl}:reads", rate)); err != nil {
		t.Fatalf("first call: %v", err)
	}
	late.Store(true)
	for i := 0; i < 5; i++ {
		_, err := r.Allow(one("vg:{v:wl}:reads", rate))
		if !errors.Is(err, ErrBusy) || errors.Is(err, ErrUnavailable) {
			t.Fatalf("call %d written late: %v, want ErrBusy", i, err)
		}
	}
	late.Store(false)
	if failures.Load() != 0 || r.State() != gobreaker.StateClosed {
		t.Fatalf("%d failures counted, breaker %s", failures.Load(), r.State())
	}
	if _, err := r.Allow(one("vg:{v:wl}:reads", rate)); err != nil {
		t.Fatalf("after the late writes: %v", err)
	}
}

// TestLateNodeWaitsForAPausedRedis: the node runs late (its probe wakes
// 150ms late, as on cores taken by others), and Redis, on the same node,
// stops for 100ms: past the callers' 50ms of wall clock, but the node ran
// on time for only a few milliseconds of it, so the on-time clock has not
// counted 50ms of silence. The callers wait for it and get their
// decisions; Redis is not called dead. On a quiet node the same pause
// fails them closed at about the timeout (TestSilentRedisFailsAtTimeout,
// and the end of this test).
func TestLateNodeWaitsForAPausedRedis(t *testing.T) {
	rs := testredis.Start(t)
	r, failures, unsent := busyLimiter(t, rs, RedisOptions{WireTimeout: 300 * time.Millisecond})
	rate := policy.Rate{Name: "reads", Limit: 1_000_000, Period: time.Minute}
	if _, err := r.Allow(one("vg:{v:paused}:reads", rate)); err != nil {
		t.Fatal(err)
	}
	r.conn.SetWakeDelay(150 * time.Millisecond)
	for deadline := time.Now().Add(5 * time.Second); r.Lateness() < 100*time.Millisecond; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("lateness %s with the probe 150ms late", r.Lateness())
		}
	}
	// Each tick of 155ms or more counts at most every+slack (7ms): the
	// on-time clock loses the rest.
	lost, from := r.conn.Lost(), time.Now()
	for r.conn.Lost()-lost < 400*time.Millisecond {
		if time.Since(from) > 5*time.Second {
			t.Fatalf("the on-time clock lost %s in %s with the probe 150ms late", r.conn.Lost()-lost, time.Since(from))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if d, w := r.conn.Lost()-lost, time.Since(from); d < w/2 {
		t.Fatalf("the on-time clock lost %s of %s with the probe 150ms late", d, w)
	}
	t.Logf("lateness %s, grace %s", r.Lateness(), r.Grace())
	for round := 0; round < 3; round++ {
		rs.Pause()
		resumed := make(chan struct{})
		go func() {
			defer close(resumed)
			time.Sleep(100 * time.Millisecond)
			rs.Resume()
		}()
		concurrently(8, func(i int) {
			d, err := r.Allow(one(fmt.Sprintf("vg:{v:paused%d}:reads", i), rate))
			if err != nil || !d.Allowed {
				t.Errorf("round %d caller %d, Redis paused 100ms on a node 150ms late: %+v %v", round, i, d, err)
			}
		})
		<-resumed
	}
	if failures.Load() != 0 || unsent.Load() != 0 || r.State() != gobreaker.StateClosed {
		t.Fatalf("failures %d, unsent %d, breaker %s", failures.Load(), unsent.Load(), r.State())
	}

	// The node quiet again: its window clears, the grace (the slowest
	// answer of the last second: the answers held by the pauses) falls
	// back, and a paused Redis is called dead at about the timeout.
	r.conn.SetWakeDelay(0)
	for deadline := time.Now().Add(10 * time.Second); r.Grace() >= 200*time.Millisecond; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("grace still %s (lateness %s) on a quiet probe", r.Grace(), r.Lateness())
		}
	}
	// The window clears a second after the last late tick; a loaded test
	// machine may stay late (ticks past the 2ms slack), and then the paused
	// Redis is called down at the 300ms wire deadline instead.
	for deadline := time.Now().Add(5 * time.Second); !r.conn.OnTime() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("quiet again: lateness %s, grace %s", r.Lateness(), r.Grace())
	rs.Pause()
	defer rs.Resume()
	start := time.Now()
	if _, err := r.Allow(one("vg:{v:paused}:reads", rate)); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Redis paused on a quiet node: %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 500*time.Millisecond { // 50ms timeout; generous for -race
		t.Fatalf("a paused Redis on a quiet node failed after %s (lateness %s)", d, r.Lateness())
	}
}

// TestRedisOutagesFailClosed: Redis killed, and Redis behind a network
// that stops forwarding (a black hole): each caller fails closed with
// ErrUnavailable, never ErrBusy, within the timeout plus the rule's
// additions on a node that runs on time, and at the wire deadline (200ms
// here) on one that does not (a loaded test machine); generous bounds for
// -race.
func TestRedisOutagesFailClosed(t *testing.T) {
	rate := policy.Rate{Name: "reads", Limit: 1_000_000, Period: time.Minute}
	check := func(t *testing.T, r *Redis, what string) {
		t.Helper()
		for i := 0; i < 5; i++ {
			start := time.Now()
			_, err := r.Allow(one("vg:{v:out}:reads", rate))
			if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrBusy) {
				t.Fatalf("%s, call %d: %v, want ErrUnavailable", what, i, err)
			}
			if d := time.Since(start); d > 500*time.Millisecond {
				t.Fatalf("%s, call %d answered after %s", what, i, d)
			}
		}
	}
	t.Run("killed", func(t *testing.T) {
		rs := testredis.Start(t)
		r, _, _ := busyLimiter(t, rs, RedisOptions{WireTimeout: 200 * time.Millisecond})
		if _, err := r.Allow(one("vg:{v:out}:reads", rate)); err != nil {
			t.Fatal(err)
		}
		rs.Stop()
		check(t, r, "Redis killed")
	})
	t.Run("black hole", func(t *testing.T) {
		rs := testredis.Start(t)
		bh, err := testredis.StartHole(rs.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(bh.Close)
		c := redis.NewClient(&redis.Options{Addr: bh.Addr(), MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true,
			DialTimeout: 100 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond})
		t.Cleanup(func() { c.Close() })
		r, err := NewRedis(withDefaults(RedisOptions{Client: c, Timeout: 50 * time.Millisecond, WireTimeout: 200 * time.Millisecond,
			Pipeline: true}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		for i := 0; i < 20; i++ {
			if _, err := r.Allow(one("vg:{v:out}:reads", rate)); err != nil {
				t.Fatal(err)
			}
		}
		bh.Hold()
		check(t, r, "Redis black-holed")
	})
}

// TestLateNodeLeavesTheVerdictToTheWire: a node whose ticks wake 10ms late
// (past the 2ms slack: a CPU quota, neighbours on its cores) does not call
// Redis down by its own clock. Redis paused 250ms (five timeouts, within
// the 500ms wire deadline) is waited for: every caller gets its decision.
// (The fitted grace gave this node 8 x (10ms - 5ms) and called Redis down
// at about 100ms.) Redis paused for good is called down at the wire
// deadline, with ErrUnavailable, not shed.
func TestLateNodeLeavesTheVerdictToTheWire(t *testing.T) {
	rs := testredis.Start(t)
	r, failures, _ := busyLimiter(t, rs, RedisOptions{})
	rate := policy.Rate{Name: "reads", Limit: 1_000_000, Period: time.Minute}
	if _, err := r.Allow(one("vg:{v:wire}:reads", rate)); err != nil {
		t.Fatal(err)
	}
	runLate(t, r)
	for round := 0; round < 3; round++ {
		rs.Pause()
		resumed := make(chan struct{})
		go func() {
			defer close(resumed)
			time.Sleep(250 * time.Millisecond)
			rs.Resume()
		}()
		concurrently(8, func(i int) {
			d, err := r.Allow(one(fmt.Sprintf("vg:{v:wire%d}:reads", i), rate))
			if err != nil || !d.Allowed {
				t.Errorf("round %d caller %d, Redis paused 250ms on a node 10ms late: %+v %v", round, i, d, err)
			}
		})
		<-resumed
	}
	if n := failures.Load(); n != 0 {
		t.Fatalf("%d failures with Redis back within the wire deadline", n)
	}
	rs.Pause()
	defer rs.Resume()
	start := time.Now()
	if _, err := r.Allow(one("vg:{v:wire}:reads", rate)); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Redis paused for good on a late node: %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d < 400*time.Millisecond || d > 1500*time.Millisecond {
		t.Fatalf("Redis paused for good on a late node called down after %s, want about the 500ms wire deadline", d)
	}
}

// TestLateNodeQueuedCallersShareTheWireVerdict: on a late node a paused
// Redis is called down at the wire deadline of the round trip in flight,
// and the callers queued behind it (one sender) are answered with it, not
// sent into the silence for a wire deadline of their own.
func TestLateNodeQueuedCallersShareTheWireVerdict(t *testing.T) {
	rs := testredis.Start(t)
	const wire = 300 * time.Millisecond
	r, _, _ := busyLimiter(t, rs, RedisOptions{WireTimeout: wire, PipelineSenders: 1})
	rate := policy.Rate{Name: "reads", Limit: 1_000_000, Period: time.Minute}
	if _, err := r.Allow(one("vg:{v:queued}:reads", rate)); err != nil {
		t.Fatal(err)
	}
	runLate(t, r)
	rs.Pause()
	defer rs.Resume()
	before := r.conn.Batches()
	sent := time.Now()
	first := make(chan error, 1)
	go func() { _, err := r.Allow(one("vg:{v:queued}:reads", rate)); first <- err }()
	for r.conn.Batches() == before { // the first call's round trip is in flight
		time.Sleep(time.Millisecond)
	}
	const n = 8
	took := make([]time.Duration, n)
	concurrently(n, func(i int) {
		_, err := r.Allow(one(fmt.Sprintf("vg:{v:queued%d}:reads", i), rate))
		took[i] = time.Since(sent)
		if !errors.Is(err, ErrUnavailable) {
			t.Errorf("queued caller %d: %v, want ErrUnavailable", i, err)
		}
	})
	if err := <-first; !errors.Is(err, ErrUnavailable) {
		t.Fatalf("the caller in flight: %v, want ErrUnavailable", err)
	}
	// A round trip of their own would end at two wire deadlines from the
	// first send; the verdict is the first's, seen at a caller's next look.
	for i, d := range took {
		if d >= 2*wire {
			t.Errorf("queued caller %d answered %s after the first send, past a second wire deadline (%s)", i, d, 2*wire)
		}
	}
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
	for round := 0; round < 3; round++ {
		rs.Pause()
		time.Sleep(250 * time.Millisecond) // a heartbeat every 25ms while nothing is heard
		rs.Resume()
		time.Sleep(100 * time.Millisecond)
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
	for deadline := time.Now().Add(5 * time.Second); failures.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("Redis paused for good: no failed heartbeat within 5s")
		}
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

// runLate makes r's node run late (its probe 10ms late after each wake)
// and waits until r no longer counts itself on time.
func runLate(t *testing.T, r *Redis) {
	t.Helper()
	r.conn.SetWakeDelay(10 * time.Millisecond)
	for deadline := time.Now().Add(5 * time.Second); r.conn.OnTime(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("on time with the probe 10ms late (lateness %s)", r.Lateness())
		}
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
	rs.Pause()
	time.Sleep(100 * time.Millisecond) // past the 50ms timeout: the leases are not honoured
	decided := make(chan Decision, 1)
	go func() {
		d, err := r.Allow(cs)
		if err != nil {
			t.Error(err)
		}
		decided <- d
	}()
	time.Sleep(50 * time.Millisecond)
	rs.Resume()
	d := <-decided
	if failures.Load() != 0 || dropped.Load() != 0 {
		t.Fatalf("Redis paused 150ms on a late node: %d failures, %d lease tokens dropped", failures.Load(), dropped.Load())
	}
	if !d.Allowed || !d.Results[1].Known || !d.Results[1].Allowed {
		t.Fatalf("the shadow limit refused with a token of its own lease at this gateway: allowed %v, shadow %+v", d.Allowed, d.Results[1])
	}
}
