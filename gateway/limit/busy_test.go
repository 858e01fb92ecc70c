package limit

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

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
	r, err := NewRedis(o)
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
	rate := Rate{Name: "reads", Limit: 1_000_000, Period: time.Minute}
	if _, err := r.Allow(one("vg:{v:late}:reads", rate)); err != nil { // connection and script
		t.Fatal(err)
	}
	r.batch.beforeSend = func() { time.Sleep(120 * time.Millisecond) }
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
	rate := Rate{Name: "reads", Limit: 10, Period: time.Hour}
	if d, err := r.Allow(one("vg:{v:shed}:reads", rate)); err != nil || d.Results[0].Remaining != 9 {
		t.Fatalf("%+v %v", d, err)
	}
	release := make(chan struct{})
	var held atomic.Bool
	r.batch.beforeSend = func() {
		if held.CompareAndSwap(false, true) {
			<-release
		}
	}
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
	rate := Rate{Name: "reads", Limit: 1_000_000, Period: time.Minute}
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
	if k := r.hooks.lastKind(); k != FailTimeout {
		t.Fatalf("last failure kind %q, want %q", k, FailTimeout)
	}
}

// TestReplyReadLateIsNotAFailure: the sender's read runs only after the
// wire deadline passed (a node that did not schedule it), with Redis'
// reply waiting in the socket. The round trip is lost, but its callers
// fail as an overloaded node (ErrBusy), not as a Redis outage, and the
// breaker counts nothing, however often it happens.
func TestReplyReadLateIsNotAFailure(t *testing.T) {
	rs := testredis.Start(t)
	c := redis.NewClient(&redis.Options{Addr: rs.Addr(), MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true,
		ReadTimeout: 100 * time.Millisecond, WriteTimeout: 100 * time.Millisecond, PoolSize: 4})
	t.Cleanup(func() { c.Close() })
	var failures atomic.Int64
	r, err := NewRedis(RedisOptions{Client: c, Timeout: 50 * time.Millisecond, WireTimeout: 100 * time.Millisecond,
		BusyTimeout: time.Second, Pipeline: true, PipelineSenders: 1,
		OnFailure: func(FailureKind, error) { failures.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	var late atomic.Bool
	r.batch.conns.beforeRead = func() {
		if late.Load() {
			time.Sleep(150 * time.Millisecond) // past the 100ms wire deadline
		}
	}
	rate := Rate{Name: "reads", Limit: 1_000_000, Period: time.Minute}
	// A first call that goes through (on a loaded machine the node itself
	// may read late already: that is ErrBusy, and another try).
	for i := 0; ; i++ {
		_, err := r.Allow(one("vg:{v:rl}:reads", rate))
		if err == nil {
			break
		}
		if !errors.Is(err, ErrBusy) || i == 20 {
			t.Fatalf("first call: %v", err)
		}
	}
	late.Store(true)
	for i := 0; i < 5; i++ {
		_, err := r.Allow(one("vg:{v:rl}:reads", rate))
		if !errors.Is(err, ErrBusy) || errors.Is(err, ErrUnavailable) {
			t.Fatalf("call %d read late: %v, want ErrBusy", i, err)
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
