package limit

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"vendorgate/gateway/policy"
	"vendorgate/shared/testredis"
)

// oneSender is a pipelined limiter with a single sender, so that the
// calls arriving while its pipeline is in flight form exactly one batch,
// whose client and timeouts allow a big batch (a thousand calls in one
// script call) timeout to be written and read under the race detector on
// a busy machine. Its batches are watched from outside: the client's
// script calls as they go (a hook of the client's), the callers' waits as
// they begin, their calls queued (the clock's timers).
func oneSender(t *testing.T, rs *testredis.Server, timeout time.Duration) (*Redis, *scriptCalls, testClock) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: rs.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true,
		ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
	t.Cleanup(func() { c.Close() })
	sc := &scriptCalls{sent: make(chan struct{}, 1)}
	c.AddHook(sc)
	clk := newTestClock(timeout)
	r, err := newRedis(withDefaults(RedisOptions{Client: c, Timeout: timeout, WireTimeout: timeout, BusyTimeout: timeout,
		Pipeline: true, PipelineMax: 1024, PipelineSenders: 1}), clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r, sc, clk
}

// scriptCalls is a client's hook that counts its round trips of script
// calls (a command or a pipeline) as they are sent, and tells sent of each.
type scriptCalls struct {
	n    atomic.Int64
	sent chan struct{}
}

func (s *scriptCalls) note() {
	s.n.Add(1)
	select {
	case s.sent <- struct{}{}:
	default:
	}
}

func (s *scriptCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *scriptCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" {
			s.note()
		}
		return next(ctx, cmd)
	}
}

func (s *scriptCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		s.note()
		return next(ctx, cmds)
	}
}

// inOneBatch holds Redis while n calls of fn queue behind a first one, then
// lets them go: the n calls are one batch. It returns their results.
func inOneBatch(t *testing.T, rs *testredis.Server, r *Redis, sc *scriptCalls, clk testClock, n int, fn func(i int) policy.Checks) []Decision {
	t.Helper()
	warm := policy.Rate{Name: "reads", Limit: 1000, Period: time.Minute}
	if _, err := r.Allow(one("vg:{v:warm}:reads", warm)); err != nil { // connection and script
		t.Fatal(err)
	}
	// Script calls counted by Redis: the first call's and the batch's.
	scripts := rs.Info(t, "commandstats").Scripts()
	for _, c := range []chan struct{}{sc.sent, clk.armed} { // the warm call's
		for len(c) > 0 {
			<-c
		}
	}
	rs.Pause()
	first := make(chan error, 1)
	go func() { _, err := r.Allow(one("vg:{v:warm}:reads", warm)); first <- err }()
	<-sc.sent // the first call's pipeline is on its way
	type res struct {
		i   int
		d   Decision
		err error
	}
	out := make(chan res, n)
	for i := 0; i < n; i++ {
		go func() { d, err := r.Allow(fn(i)); out <- res{i, d, err} }()
	}
	for range n + 1 { // the first call's wait and the n calls', each begun with its call queued
		<-clk.armed
	}
	rs.Resume()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	ds := make([]Decision, n)
	for range n {
		x := <-out
		if x.err != nil {
			t.Fatalf("call %d: %v", x.i, x.err)
		}
		ds[x.i] = x.d
	}
	if got := rs.Info(t, "commandstats").Scripts() - scripts - 1; got != 1 {
		t.Fatalf("%d script calls for one batch of %d calls, want 1", got, n)
	}
	return ds
}

// TestBatchOneScriptSharedBucket: a batch is one script call, and a bucket
// that many calls of the batch share is charged in order: exactly its
// limit is admitted.
func TestBatchOneScriptSharedBucket(t *testing.T) {
	rs := testredis.Start(t)
	r, sc, clk := oneSender(t, rs, 5*time.Second)
	const n, l = 40, 10
	rate := policy.Rate{Name: "reads", Limit: l, Period: time.Hour}
	ds := inOneBatch(t, rs, r, sc, clk, n, func(int) policy.Checks { return one("vg:{v:shared}:reads", rate) })
	allowed := 0
	seen := map[int]bool{}
	for _, d := range ds {
		if d.Allowed {
			allowed++
			seen[d.Results[0].Remaining] = true
		}
	}
	if allowed != l || len(seen) != l {
		t.Fatalf("allowed %d (remaining values %v), want %d with %d distinct remainders", allowed, seen, l, l)
	}
}

// TestBatchThousandBuckets: 1,000 distinct buckets in flight in one batch
// each get their own answer, and a second round finds each charged once.
func TestBatchThousandBuckets(t *testing.T) {
	rs := testredis.Start(t)
	r, sc, clk := oneSender(t, rs, 10*time.Second)
	const n = 1000
	checks := func(i int) policy.Checks {
		var cs policy.Checks
		cs.Add(policy.Check{Key: fmt.Sprintf("vg:{v:t%d}:reads", i), Rate: policy.Rate{Name: "reads", Limit: 2 + i%3, Period: time.Hour}})
		if i%2 == 0 {
			cs.Add(policy.Check{Key: fmt.Sprintf("vg:{v:t%d}:k:1:reads", i), Rate: policy.Rate{Name: "key-reads", Limit: 1, Period: time.Hour}})
		}
		return cs
	}
	for round := 0; round < 2; round++ {
		ds := inOneBatch(t, rs, r, sc, clk, n, checks)
		for i, d := range ds {
			limit := 2 + i%3
			switch {
			case round == 0 && (!d.Allowed || d.Results[0].Remaining != limit-1):
				t.Fatalf("round 1, bucket %d: %+v", i, d)
			case round == 1 && i%2 == 0 && d.Allowed:
				t.Fatalf("round 2, bucket %d: its per-key limit of 1 was charged in round 1, yet allowed: %+v", i, d)
			case round == 1 && i%2 == 1 && (!d.Allowed || d.Results[0].Remaining != limit-2):
				t.Fatalf("round 2, bucket %d: %+v", i, d)
			}
		}
	}
}

// TestBatchCluster: on a Redis Cluster a batch is one script call per hash
// slot; answers and exactness hold.
func TestBatchCluster(t *testing.T) {
	cl := testredis.StartCluster(t)
	cl.WaitOK(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	sc := &scriptCalls{sent: make(chan struct{}, 1)}
	c.AddHook(sc)
	r, err := NewRedis(withDefaults(RedisOptions{Client: c, Timeout: 5 * time.Second, Pipeline: true}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	const vendors, calls, l = 16, 200, 5
	var allowed [vendors]atomic.Int64
	concurrently(calls, func(i int) {
		v := i % vendors
		d, err := r.Allow(one(fmt.Sprintf("vg:{v:c%d}:reads", v), policy.Rate{Name: "reads", Limit: l, Period: time.Hour}))
		if err != nil {
			t.Error(err)
			return
		}
		if d.Allowed {
			allowed[v].Add(1)
		}
	})
	for v := range allowed {
		if got := allowed[v].Load(); got != l {
			t.Errorf("vendor %d admitted %d, want %d", v, got, l)
		}
	}
	var scripts int64
	for _, node := range cl.Nodes { // each node's script calls, counted by Redis
		scripts += node.Info(t, "commandstats").Scripts()
	}
	if s, b := scripts, sc.n.Load(); s < b || s > calls {
		t.Fatalf("%d script calls in %d batches for %d calls", s, b, calls)
	}
}
