package redisconn

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"vendorgate/config"
)

// counter is the tests' script: each call has one key and no argument of
// its own, and is answered one value, its key's count after one more
// (INCR): a call charged twice, or not at all, shows in the next count.
var counter = redis.NewScript(`local out, k, a = {}, 1, 1
while a <= #ARGV do
  local n = tonumber(ARGV[a]); out[#out + 1] = redis.call('INCR', KEYS[k]); k = k + n; a = a + 1
end
return out`)

// testConn is a pipelined Conn as the gateway builds it (config's
// defaults for what a test does not set), counting the round trips it
// reports failed and the calls given up before they were sent.
type testConn struct {
	*Conn
	clock            *lateClock
	failures, unsent atomic.Int64
}

// lateClock is the system's clock whose timers (the callers' waits, the
// on-time probe) fire late by late: a node that gets its cores late. With
// armed set, each timer armed for waitFor (a caller's wait begun, its call
// queued: see batcher.do) is told to it.
type lateClock struct {
	SystemClock
	late    atomic.Int64
	waitFor time.Duration
	armed   chan struct{}
}

func (c *lateClock) NewTimer() Timer { return lateTimer{c.SystemClock.NewTimer(), c} }

type lateTimer struct {
	Timer
	c *lateClock
}

func (t lateTimer) Reset(d time.Duration) bool {
	if t.c.armed != nil && d == t.c.waitFor {
		t.c.armed <- struct{}{}
	}
	return t.Timer.Reset(d + time.Duration(t.c.late.Load()))
}

// drain forgets the waits armed so far.
func (c *lateClock) drain() {
	for len(c.armed) > 0 {
		<-c.armed
	}
}

// queued waits until n calls' waits are armed on c (their calls queued),
// for up to bound; it reports whether they were.
func (c *lateClock) queued(n int, bound time.Duration) bool {
	timeout := time.NewTimer(bound)
	defer timeout.Stop()
	for ; n > 0; n-- {
		select {
		case <-c.armed:
		case <-timeout.C:
			return false
		}
	}
	return true
}

// within polls cond until it holds, for up to bound, and reports whether
// it held: for a state nothing announces (the on-time probe's window, the
// clock's loss, published a tick at a time). In a synctest bubble
// (TestOnTimeClock) its waits are the bubble's clock; out of one they are
// the wall clock, which is what the tests of a real Redis (paused by the
// operating system) on a probe late by the system's timers wait on.
func within(bound time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(bound); !cond(); {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond) // a poll's pace: the state has no event to wait on
	}
	return true
}

// connSettings is what a test changes of the defaults.
type connSettings struct {
	// dial, when set, is the client's dialer (a simulated Redis': see
	// simWorld.testConn).
	dial                func(ctx context.Context, network, addr string) (net.Conn, error)
	timeout, wire, busy time.Duration
	senders, max, pool  int
	// clientTimeout is the client's read and write timeout (500ms when 0).
	clientTimeout time.Duration
	// queued: the callers' waits are told to the clock's armed (see
	// lateClock.queued).
	queued bool
}

// testConn is a pipelined Conn to w's simulated Redis with s over
// config's defaults (see newTestConn), in w's bubble.
func (w *simWorld) testConn(t *testing.T, s connSettings) *testConn {
	t.Helper()
	s.dial = w.dial
	return newTestConn(t, "127.0.0.1:6379", s)
}

// newTestConn is a pipelined Conn to addr with s over config's defaults.
func newTestConn(t *testing.T, addr string, s connSettings) *testConn {
	t.Helper()
	d := config.DefaultGateway().Redis
	pick := func(v, def time.Duration) time.Duration {
		if v == 0 {
			return def
		}
		return v
	}
	timeout := pick(s.timeout, d.Timeout)
	wire, busy := max(pick(s.wire, d.WireTimeout), timeout), max(pick(s.busy, d.BusyTimeout), timeout)
	senders, pmax := s.senders, s.max
	if senders == 0 {
		senders = d.PipelineSenders
	}
	if pmax == 0 {
		pmax = d.PipelineMax
	}
	co := &redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true,
		DialTimeout: 100 * time.Millisecond, ReadTimeout: pick(s.clientTimeout, 500*time.Millisecond),
		WriteTimeout: pick(s.clientTimeout, 500*time.Millisecond), PoolSize: s.pool}
	if s.dial != nil {
		co.Dialer, co.Protocol, co.DisableIdentity = s.dial, 2, true
	}
	c := redis.NewClient(co)
	t.Cleanup(func() { c.Close() })
	tc := &testConn{clock: &lateClock{SystemClock: SystemClock{Epoch: time.Now()}}}
	if s.queued {
		tc.clock.waitFor, tc.clock.armed = timeout, make(chan struct{}, 4096)
	}
	h, err := NewHealth(HealthOptions{BreakerOpenFor: d.BreakerOpenFor, BreakerFailures: d.BreakerFailures,
		BreakerWindow: d.BreakerWindow, BreakerFailureRatio: float64(d.BreakerFailurePercent) / 100,
		OnFailure: func(FailureKind, error) { tc.failures.Add(1) }, OnUnsent: func() { tc.unsent.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	tc.Conn, err = New(Options{Client: c, Script: counter, Timeout: timeout, WireTimeout: wire, BusyTimeout: busy,
		Pipeline: true, PipelineMax: pmax, PipelineSenders: senders, TickSlack: d.TickSlack}, h, tc.clock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	return tc
}

// count is one call of the counter for key: its count after this call.
func (c *testConn) count(key string) (int64, error) { return count(c.Conn, key) }

// count is one call of the counter on c for key: its count after this
// call.
func count(c *Conn, key string) (int64, error) {
	call := c.Call()
	call.Keys[0], call.NKeys, call.NArgs, call.NValues = key, 1, 0, 1
	v, err := c.Do(call)
	if err != nil {
		return 0, err
	}
	n, ok := v[0].(int64)
	if !ok {
		return 0, errors.New("the counter answered no integer")
	}
	return n, nil
}

// unavailable reports whether err is what the limiter answers as Redis
// unavailable (503 rate_limit_unavailable): any failure but ErrBusy
// (gateway/limit wraps all others as its ErrUnavailable).
func unavailable(err error) bool { return err != nil && !errors.Is(err, ErrBusy) }

// state is the breaker's state.
func (c *testConn) state() string { return c.health.State().String() }

// concurrently runs fn(i) for i in [0, n) at once and waits.
func concurrently(n int, fn func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			fn(i)
		}()
	}
	close(start)
	wg.Wait()
}
