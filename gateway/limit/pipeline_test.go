package limit

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"vendorgate/gateway/policy"
	"vendorgate/shared/testredis"
)

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

// TestPipelineOwnResults: callers batched together each get the answer for
// their own buckets (bucket i has burst i+2, so one call leaves i+1).
func TestPipelineOwnResults(t *testing.T) {
	rs := testredis.Start(t)
	r := newPatientRedis(t, rs, 2*time.Second, true) // -race on a busy machine
	const n = 64
	errs := make(chan error, n)
	concurrently(n, func(i int) {
		var cs policy.Checks
		cs.Add(policy.Check{Key: fmt.Sprintf("vg:{v:own%d}:reads", i), Rate: policy.Rate{Name: "reads", Limit: i + 2, Period: time.Minute}})
		if i%2 == 1 { // half carry a per-key limit too: two keys per script call
			cs.Add(policy.Check{Key: fmt.Sprintf("vg:{v:own%d}:k:1:reads", i), Rate: policy.Rate{Name: "key-reads", Limit: 1, Period: time.Minute}})
		}
		d, err := r.Allow(cs)
		switch {
		case err != nil:
			errs <- err
		case !d.Allowed || d.Count != cs.Count || d.Results[0].Remaining != i+1:
			errs <- fmt.Errorf("caller %d: %+v", i, d)
		case cs.Count == 2 && d.Results[1].Remaining != 0:
			errs <- fmt.Errorf("caller %d key limit: %+v", i, d.Results[1])
		}
	})
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if b := rs.Info(t, "commandstats").Scripts(); b == 0 || b > n { // one script call a pipeline
		t.Fatalf("%d pipelines for %d calls", b, n)
	}
}

// TestPipelineExact: N concurrent callers against a limit of L admit exactly
// L, batched or not.
func TestPipelineExact(t *testing.T) {
	rs := testredis.Start(t)
	r := newPatientRedis(t, rs, 2*time.Second, true)
	const n, l = 300, 50
	var allowed, denied atomic.Int64
	rate := policy.Rate{Name: "reads", Limit: l, Period: time.Hour}
	concurrently(n, func(int) {
		d, err := r.Allow(one("vg:{v:exact}:reads", rate))
		switch {
		case err != nil:
			t.Error(err)
		case d.Allowed:
			allowed.Add(1)
		default:
			denied.Add(1)
		}
	})
	if allowed.Load() != l || denied.Load() != n-l {
		t.Fatalf("allowed %d denied %d, want %d and %d", allowed.Load(), denied.Load(), l, n-l)
	}
}

// newPatientRedis is a limiter (pipelined or not) that gives its calls d
// for everything (a caller's wait, the wire, the busy bound): for tests
// whose subject is not the timeouts, under -race on a busy machine.
func newPatientRedis(t testing.TB, rs *testredis.Server, d time.Duration, pipeline bool) *Redis {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: rs.Addr(), MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true,
		DialTimeout: 100 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	r, err := NewRedis(withDefaults(RedisOptions{Client: c, Timeout: d, WireTimeout: d, BusyTimeout: d,
		BreakerOpenFor: 200 * time.Millisecond, Pipeline: pipeline}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}
