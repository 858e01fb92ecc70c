package limit

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"vendorgate/shared/testredis"
)

// newRedisSlow is a pipelined limiter whose client allows a big batch
// (a thousand calls in one script call) seconds to be written and read
// under the race detector on a busy machine.
func newRedisSlow(t *testing.T, rs *testredis.Server) *Redis {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: rs.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true,
		ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
	t.Cleanup(func() { c.Close() })
	r, err := NewRedis(RedisOptions{Client: c, Timeout: 10 * time.Second, TickSlack: testTickSlack, Pipeline: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// oneSender swaps r's batcher for one with a single sender, so that the
// calls arriving while its pipeline is in flight form exactly one batch.
func oneSender(t *testing.T, r *Redis, timeout time.Duration) {
	t.Helper()
	r.batch.close()
	r.batch = newBatcher(r.client, &RedisOptions{Timeout: timeout, WireTimeout: timeout, BusyTimeout: timeout,
		PipelineMax: 1024, PipelineSenders: 1}, r.cb, r.hooks, r.clock)
	r.heard = &r.batch.conns.lastRead
	t.Cleanup(r.batch.close)
}

// patient gives r's calls d for everything (a caller's wait, the wire, the
// busy bound): for tests whose subject is not the timeouts, under -race on
// a busy machine.
func patient(r *Redis, d time.Duration) {
	r.timeout = d
	if r.batch != nil {
		r.batch.timeout, r.batch.wire, r.batch.busy = d, d, d
	}
}

// inOneBatch holds Redis while n calls of fn queue behind a first one, then
// lets them go: the n calls are one batch. It returns their results.
func inOneBatch(t *testing.T, rs *testredis.Server, r *Redis, n int, fn func(i int) Checks) []Decision {
	t.Helper()
	warm := Rate{Name: "reads", Limit: 1000, Period: time.Minute}
	if _, err := r.Allow(one("vg:{v:warm}:reads", warm)); err != nil { // connection and script
		t.Fatal(err)
	}
	before := r.batch.batches.Load()
	rs.Pause()
	first := make(chan error, 1)
	go func() { _, err := r.Allow(one("vg:{v:warm}:reads", warm)); first <- err }()
	for r.batch.batches.Load() == before {
		time.Sleep(time.Millisecond)
	}
	type res struct {
		i   int
		d   Decision
		err error
	}
	out := make(chan res, n)
	for i := 0; i < n; i++ {
		go func() { d, err := r.Allow(fn(i)); out <- res{i, d, err} }()
	}
	for len(r.batch.queue) < n {
		time.Sleep(time.Millisecond)
	}
	scripts := r.batch.scripts.Load()
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
	if got := r.batch.scripts.Load() - scripts; got != 1 {
		t.Fatalf("%d script calls for one batch of %d calls, want 1", got, n)
	}
	return ds
}

// TestBatchOneScriptSharedBucket: a batch is one script call, and a bucket
// that many calls of the batch share is charged in order: exactly its
// limit is admitted.
func TestBatchOneScriptSharedBucket(t *testing.T) {
	rs := testredis.Start(t)
	r := newRedisSlow(t, rs)
	oneSender(t, r, 5*time.Second)
	const n, l = 40, 10
	rate := Rate{Name: "reads", Limit: l, Period: time.Hour}
	ds := inOneBatch(t, rs, r, n, func(int) Checks { return one("vg:{v:shared}:reads", rate) })
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
	r := newRedisSlow(t, rs)
	oneSender(t, r, 10*time.Second)
	const n = 1000
	checks := func(i int) Checks {
		var cs Checks
		cs.Add(Check{Key: fmt.Sprintf("vg:{v:t%d}:reads", i), Rate: Rate{Name: "reads", Limit: 2 + i%3, Period: time.Hour}})
		if i%2 == 0 {
			cs.Add(Check{Key: fmt.Sprintf("vg:{v:t%d}:k:1:reads", i), Rate: Rate{Name: "key-reads", Limit: 1, Period: time.Hour}})
		}
		return cs
	}
	for round := 0; round < 2; round++ {
		ds := inOneBatch(t, rs, r, n, checks)
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
	r, err := NewRedis(RedisOptions{Client: c, Timeout: 5 * time.Second, TickSlack: testTickSlack, Pipeline: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	const vendors, calls, l = 16, 200, 5
	var allowed [vendors]atomic.Int64
	concurrently(calls, func(i int) {
		v := i % vendors
		d, err := r.Allow(one(fmt.Sprintf("vg:{v:c%d}:reads", v), Rate{Name: "reads", Limit: l, Period: time.Hour}))
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
	if s, b := r.batch.scripts.Load(), r.batch.batches.Load(); s < b || s > calls {
		t.Fatalf("%d script calls in %d batches for %d calls", s, b, calls)
	}
}

func TestSlot(t *testing.T) {
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	for key, want := range map[string]uint16{"123456789": 0x31C3, "foo": 12182, "{user1000}.following": 3443,
		"{user1000}.followers": 3443, "foo{}{bar}": 8363, "foo{{bar}}zap": 4015, "foo{bar}{zap}": 5061} {
		if got := slot(key); got != want%16384 {
			t.Errorf("slot(%q) = %d, want %d", key, got, want%16384)
		}
	}
}
