package redisconn

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"vendorgate/shared/testredis"
)

// The transport's two promises, tested from outside with a real Redis
// (paused with SIGSTOP, killed, black-holed) and a node made late by the
// batcher's own seams (a sender, reader or writer that gets its core late,
// a probe that wakes late): no call fails while Redis answers within its
// rule, and a call fails closed (unavailable) at about Timeout on a node
// on time, at the wire deadline on a late one, when Redis is silent. The
// tests of a late core run in a synctest bubble over the simulated Redis
// of sim_test.go (inBubble): the core's lateness and the deadlines it
// passes take no wall time, and nothing else of the machine's is late.

// TestLateSenderIsNotAFailure: a sender that gets its core 120ms late (a
// busy node: the callers' 50ms pass before their calls are even sent)
// while Redis answers at once. Every caller gets its reply; nothing counts
// against the breaker, which stays closed.
func TestLateSenderIsNotAFailure(t *testing.T) {
	inBubble(t, func(t *testing.T, w *simWorld) {
		c := w.testConn(t, connSettings{})
		if _, err := c.count("late"); err != nil { // connection and script
			t.Fatal(err)
		}
		c.batch.beforeSend = func() { advance(120 * time.Millisecond) } // the sender's core, 120ms late
		for round := 0; round < 4; round++ {
			concurrently(16, func(i int) {
				if _, err := c.count(fmt.Sprintf("late%d", i)); err != nil {
					t.Errorf("round %d caller %d: %v", round, i, err)
				}
			})
		}
		if n := c.failures.Load(); n != 0 {
			t.Errorf("%d round trips counted as failed with Redis answering", n)
		}
		if n := c.unsent.Load(); n != 0 {
			t.Errorf("%d calls given up before they were sent", n)
		}
		if s := c.state(); s != "closed" {
			t.Errorf("breaker %s with Redis answering", s)
		}
	})
}

// TestBusyBoundShedsUncharged: a sender later than the busy bound. The
// caller gives up with ErrBusy (an overloaded node), not as Redis
// unavailable (Redis is fine); its call was never sent, so its key was
// not counted, and it is counted as given up unsent.
func TestBusyBoundShedsUncharged(t *testing.T) {
	rs := testredis.Start(t)
	c := newTestConn(t, rs.Addr(), connSettings{busy: 200 * time.Millisecond})
	if n, err := c.count("shed"); err != nil || n != 1 {
		t.Fatalf("%d %v", n, err)
	}
	release := make(chan struct{})
	var held atomic.Bool
	c.batch.beforeSend = func() {
		if held.CompareAndSwap(false, true) {
			<-release
		}
	}
	_, err := c.count("shed")
	if !errors.Is(err, ErrBusy) || unavailable(err) {
		t.Fatalf("past the busy bound: %v, want ErrBusy", err)
	}
	close(release)
	if n, err := c.count("shed"); err != nil || n != 2 {
		t.Fatalf("the shed call was charged: count %d %v, want 2", n, err)
	}
	if c.unsent.Load() != 1 || c.failures.Load() != 0 {
		t.Fatalf("unsent %d, failures %d; want 1 and 0", c.unsent.Load(), c.failures.Load())
	}
}

// TestSilentRedisFailsAtTimeout: a hung Redis (SIGSTOP) fails each caller
// closed within its timeout (and a second look), and the breaker opens
// once enough round trips have failed on the wire.
func TestSilentRedisFailsAtTimeout(t *testing.T) {
	rs := testredis.Start(t)
	c := newTestConn(t, rs.Addr(), connSettings{wire: 200 * time.Millisecond})
	if _, err := c.count("silent"); err != nil {
		t.Fatal(err)
	}
	rs.Pause()
	defer rs.Resume()
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; c.state() != "open"; i++ {
		start := time.Now()
		_, err := c.count("silent")
		if !unavailable(err) {
			t.Fatalf("call %d to a hung Redis: %v", i, err)
		}
		if d := time.Since(start); d > 500*time.Millisecond { // 50ms timeout; generous for -race
			t.Fatalf("call %d answered after %s", i, d)
		}
		if time.Now().After(deadline) {
			t.Fatalf("breaker still %s after %d failed round trips", c.state(), c.failures.Load())
		}
	}
	if k := c.health.LastKind(); k != FailTimeout {
		t.Fatalf("last failure kind %q, want %q", k, FailTimeout)
	}
}

// lateNodeConn is a pipelined Conn with one sender on w's simulated
// Redis, a 100ms wire deadline, and a count of the failures it reports:
// the setting of the tests of a node that gets to its socket late.
func lateNodeConn(t *testing.T, w *simWorld) *testConn {
	t.Helper()
	return w.testConn(t, connSettings{wire: 100 * time.Millisecond, busy: time.Second, senders: 1,
		pool: 4, clientTimeout: 100 * time.Millisecond})
}

// TestReplyReadLateIsTaken: the sender's read runs only after the wire
// deadline passed (a node that did not schedule it), with Redis' reply
// waiting in the socket. Redis answered in time: the reply is taken, not
// thrown away with the connection, and its callers get their replies; the
// breaker counts nothing, however often it happens. (Before, the round
// trip was lost and its callers refused 503 request_failed: a vendor's
// read failed on a loaded node with its decision in hand.)
func TestReplyReadLateIsTaken(t *testing.T) {
	inBubble(t, func(t *testing.T, w *simWorld) {
		c := lateNodeConn(t, w)
		var late atomic.Bool
		c.batch.conns.beforeRead = func() {
			if late.Load() {
				advance(150 * time.Millisecond) // the reader's core, past the 100ms wire deadline
			}
		}
		if _, err := c.count("rl"); err != nil {
			t.Fatalf("first call: %v", err)
		}
		late.Store(true)
		for i := 0; i < 5; i++ {
			if n, err := c.count("rl"); err != nil || n != int64(i+2) {
				t.Fatalf("call %d read late with the reply waiting: count %d, %v; want %d", i, n, err, i+2)
			}
		}
		late.Store(false)
		if c.failures.Load() != 0 || c.state() != "closed" {
			t.Fatalf("%d failures counted, breaker %s", c.failures.Load(), c.state())
		}
		if _, err := c.count("rl"); err != nil {
			t.Fatalf("after the late reads: %v", err)
		}
	})
}

// TestRequestWrittenLateIsNotAFailure: the sender's write runs only after
// the wire deadline passed (a node that did not schedule it), so the
// request is never written and Redis never asked. Its callers fail as an
// overloaded node (ErrBusy), not as a Redis outage, and the breaker counts
// nothing, however often it happens. (Before, the write's i/o timeout was
// a Redis timeout: 503 rate_limit_unavailable, and one failure for the
// breaker each.)
func TestRequestWrittenLateIsNotAFailure(t *testing.T) {
	inBubble(t, func(t *testing.T, w *simWorld) {
		c := lateNodeConn(t, w)
		var late atomic.Bool
		c.batch.conns.beforeWrite = func() {
			if late.Load() {
				advance(150 * time.Millisecond) // the writer's core, past the 100ms wire deadline
			}
		}
		if _, err := c.count("wl"); err != nil {
			t.Fatalf("first call: %v", err)
		}
		late.Store(true)
		for i := 0; i < 5; i++ {
			_, err := c.count("wl")
			if !errors.Is(err, ErrBusy) || unavailable(err) {
				t.Fatalf("call %d written late: %v, want ErrBusy", i, err)
			}
		}
		late.Store(false)
		if c.failures.Load() != 0 || c.state() != "closed" {
			t.Fatalf("%d failures counted, breaker %s", c.failures.Load(), c.state())
		}
		if _, err := c.count("wl"); err != nil {
			t.Fatalf("after the late writes: %v", err)
		}
	})
}

// TestLateNodeWaitsForAPausedRedis: the node runs late (its timers, its
// probe's among them, wake 150ms late, as on cores taken by others), and Redis, on the same node,
// stops for 100ms: past the callers' 50ms of wall clock, but the node ran
// on time for only a few milliseconds of it, so the on-time clock has not
// counted 50ms of silence. The callers wait for it and get their replies;
// Redis is not called dead. On a quiet node the same pause fails them
// closed at about the timeout (TestSilentRedisFailsAtTimeout, and the end
// of this test).
func TestLateNodeWaitsForAPausedRedis(t *testing.T) {
	rs := testredis.Start(t)
	c := newTestConn(t, rs.Addr(), connSettings{wire: 300 * time.Millisecond})
	if _, err := c.count("paused"); err != nil {
		t.Fatal(err)
	}
	c.clock.late.Store(int64(150 * time.Millisecond))
	if !within(5*time.Second, func() bool { return c.Lateness() >= 100*time.Millisecond }) {
		t.Fatalf("lateness %s with the probe 150ms late", c.Lateness())
	}
	// Each tick of 155ms or more counts at most every+slack (7ms): the
	// on-time clock loses the rest.
	lost, from := c.batch.late.Lost(), time.Now()
	if !within(5*time.Second, func() bool { return c.batch.late.Lost()-lost >= 400*time.Millisecond }) {
		t.Fatalf("the on-time clock lost %s in %s with the probe 150ms late", c.batch.late.Lost()-lost, time.Since(from))
	}
	if d, w := c.batch.late.Lost()-lost, time.Since(from); d < w/2 {
		t.Fatalf("the on-time clock lost %s of %s with the probe 150ms late", d, w)
	}
	t.Logf("lateness %s, grace %s", c.Lateness(), c.Grace())
	for round := 0; round < 3; round++ {
		rs.Pause()
		resumed := make(chan struct{})
		time.AfterFunc(100*time.Millisecond, func() { rs.Resume(); close(resumed) })
		concurrently(8, func(i int) {
			if _, err := c.count(fmt.Sprintf("paused%d", i)); err != nil {
				t.Errorf("round %d caller %d, Redis paused 100ms on a node 150ms late: %v", round, i, err)
			}
		})
		<-resumed
	}
	if c.failures.Load() != 0 || c.unsent.Load() != 0 || c.state() != "closed" {
		t.Fatalf("failures %d, unsent %d, breaker %s", c.failures.Load(), c.unsent.Load(), c.state())
	}

	// The node quiet again: its window clears, the grace (the slowest
	// answer of the last second: the answers held by the pauses) falls
	// back, and a paused Redis is called dead at about the timeout.
	c.clock.late.Store(0)
	if !within(10*time.Second, func() bool { return c.Grace() < 200*time.Millisecond }) {
		t.Fatalf("grace still %s (lateness %s) on a quiet probe", c.Grace(), c.Lateness())
	}
	// The window clears a second after the last late tick; a loaded test
	// machine may stay late (ticks past the 2ms slack), and then the paused
	// Redis is called down at the 300ms wire deadline instead.
	within(5*time.Second, c.OnTime)
	t.Logf("quiet again: lateness %s, grace %s", c.Lateness(), c.Grace())
	rs.Pause()
	defer rs.Resume()
	start := time.Now()
	if _, err := c.count("paused"); !unavailable(err) {
		t.Fatalf("Redis paused on a quiet node: %v, want it unavailable", err)
	}
	if d := time.Since(start); d > 500*time.Millisecond { // 50ms timeout; generous for -race
		t.Fatalf("a paused Redis on a quiet node failed after %s (lateness %s)", d, c.Lateness())
	}
}

// TestRedisOutagesFailClosed: Redis killed, and Redis behind a network
// that stops forwarding (a black hole): each caller fails closed
// (unavailable), never ErrBusy, within the timeout plus the rule's
// additions on a node that runs on time, and at the wire deadline (200ms
// here) on one that does not (a loaded test machine); generous bounds for
// -race.
func TestRedisOutagesFailClosed(t *testing.T) {
	check := func(t *testing.T, c *testConn, what string) {
		t.Helper()
		for i := 0; i < 5; i++ {
			start := time.Now()
			_, err := c.count("out")
			if !unavailable(err) {
				t.Fatalf("%s, call %d: %v, want it unavailable", what, i, err)
			}
			if d := time.Since(start); d > 500*time.Millisecond {
				t.Fatalf("%s, call %d answered after %s", what, i, d)
			}
		}
	}
	t.Run("killed", func(t *testing.T) {
		rs := testredis.Start(t)
		c := newTestConn(t, rs.Addr(), connSettings{wire: 200 * time.Millisecond})
		if _, err := c.count("out"); err != nil {
			t.Fatal(err)
		}
		rs.Stop()
		check(t, c, "Redis killed")
	})
	t.Run("black hole", func(t *testing.T) {
		rs := testredis.Start(t)
		bh, err := testredis.StartHole(rs.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(bh.Close)
		c := newTestConn(t, bh.Addr(), connSettings{wire: 200 * time.Millisecond})
		for i := 0; i < 20; i++ {
			if _, err := c.count("out"); err != nil {
				t.Fatal(err)
			}
		}
		bh.Hold()
		check(t, c, "Redis black-holed")
	})
}

// TestLateNodeLeavesTheVerdictToTheWire: a node whose ticks wake 10ms late
// (past the 2ms slack: a CPU quota, neighbours on its cores) does not call
// Redis down by its own clock. Redis paused 250ms (five timeouts, within
// the 500ms wire deadline) is waited for: every caller gets its reply.
// (The fitted grace gave this node 8 x (10ms - 5ms) and called Redis down
// at about 100ms.) Redis paused for good is called down at the wire
// deadline, unavailable, not shed.
func TestLateNodeLeavesTheVerdictToTheWire(t *testing.T) {
	rs := testredis.Start(t)
	c := newTestConn(t, rs.Addr(), connSettings{})
	if _, err := c.count("wire"); err != nil {
		t.Fatal(err)
	}
	runLate(t, c)
	for round := 0; round < 3; round++ {
		rs.Pause()
		resumed := make(chan struct{})
		time.AfterFunc(250*time.Millisecond, func() { rs.Resume(); close(resumed) })
		concurrently(8, func(i int) {
			if _, err := c.count(fmt.Sprintf("wire%d", i)); err != nil {
				t.Errorf("round %d caller %d, Redis paused 250ms on a node 10ms late: %v", round, i, err)
			}
		})
		<-resumed
	}
	if n := c.failures.Load(); n != 0 {
		t.Fatalf("%d failures with Redis back within the wire deadline", n)
	}
	rs.Pause()
	defer rs.Resume()
	start := time.Now()
	if _, err := c.count("wire"); !unavailable(err) {
		t.Fatalf("Redis paused for good on a late node: %v, want it unavailable", err)
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
	c := newTestConn(t, rs.Addr(), connSettings{wire: wire, senders: 1})
	if _, err := c.count("queued"); err != nil {
		t.Fatal(err)
	}
	runLate(t, c)
	rs.Pause()
	defer rs.Resume()
	sending := make(chan struct{}, 1)
	c.batch.beforeSend = func() {
		select {
		case sending <- struct{}{}:
		default:
		}
	}
	sent := time.Now()
	first := make(chan error, 1)
	go func() { _, err := c.count("queued"); first <- err }()
	<-sending // the first call's round trip is in flight
	const n = 8
	took := make([]time.Duration, n)
	concurrently(n, func(i int) {
		_, err := c.count(fmt.Sprintf("queued%d", i))
		took[i] = time.Since(sent)
		if !unavailable(err) {
			t.Errorf("queued caller %d: %v, want it unavailable", i, err)
		}
	})
	if err := <-first; !unavailable(err) {
		t.Fatalf("the caller in flight: %v, want it unavailable", err)
	}
	// A round trip of their own would end at two wire deadlines from the
	// first send; the verdict is the first's, seen at a caller's next look.
	for i, d := range took {
		if d >= 2*wire {
			t.Errorf("queued caller %d answered %s after the first send, past a second wire deadline (%s)", i, d, 2*wire)
		}
	}
}

// runLate makes c's node run late (its timers, its probe's among them,
// 10ms late)
// and waits until c no longer counts itself on time.
func runLate(t *testing.T, c *testConn) {
	t.Helper()
	c.clock.late.Store(int64(10 * time.Millisecond))
	if !within(5*time.Second, func() bool { return !c.OnTime() }) {
		t.Fatalf("on time with the probe 10ms late (lateness %s)", c.Lateness())
	}
}
