package limit

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
	r := newRedisOpts(t, rs, nil, true)
	patient(r, 2*time.Second) // -race on a busy machine
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
	if b := r.conn.Batches(); b == 0 || b > n {
		t.Fatalf("%d pipelines for %d calls", b, n)
	}
}

// TestPipelineExact: N concurrent callers against a limit of L admit exactly
// L, batched or not.
func TestPipelineExact(t *testing.T) {
	rs := testredis.Start(t)
	r := newRedisOpts(t, rs, nil, true)
	patient(r, 2*time.Second)
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

// TestPipelineReusesCallsSafely: callers that call again and again reuse
// pooled calls; a caller must be done with its call before another takes
// it (go test -race fails otherwise: the gateway built with -race exited on
// this under a steady load).
func TestPipelineReusesCallsSafely(t *testing.T) {
	rs := testredis.Start(t)
	r := newRedisOpts(t, rs, nil, true)
	patient(r, 2*time.Second) // -race on a busy machine
	rate := policy.Rate{Name: "reads", Limit: 1 << 30, Period: time.Minute}
	concurrently(16, func(i int) {
		for range 100 {
			if _, err := r.Allow(one(fmt.Sprintf("vg:{v:reuse%d}:reads", i), rate)); err != nil {
				t.Error(err)
				return
			}
		}
	})
}

// TestPipelineBatches: calls that arrive while every sender is busy go
// together in the next pipeline (one sender here, to count exactly).
func TestPipelineBatches(t *testing.T) {
	rs := testredis.Start(t)
	r := newRedisOpts(t, rs, nil, true)
	oneSender(t, r, 5*time.Second)
	rate := policy.Rate{Name: "reads", Limit: 1000, Period: time.Minute}
	if _, err := r.Allow(one("vg:{v:b}:reads", rate)); err != nil { // warm: connection and script
		t.Fatal(err)
	}
	before := r.conn.Batches()
	rs.Pause()
	done := make(chan error, 1)
	go func() { _, err := r.Allow(one("vg:{v:b}:reads", rate)); done <- err }()
	for r.conn.Batches() == before { // the first call's pipeline is in flight
		time.Sleep(time.Millisecond)
	}
	const n = 40
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() { _, err := r.Allow(one("vg:{v:b}:reads", rate)); errs <- err }()
	}
	for r.conn.Queued() < n {
		time.Sleep(time.Millisecond)
	}
	rs.Resume()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := r.conn.Batches() - before; got != 2 {
		t.Fatalf("%d pipelines for 1 + %d calls, want 2", got, n)
	}
}

// TestPipelineHungRedis: with Redis hung, every waiting caller answers
// ErrUnavailable within its timeout (and a second look).
func TestPipelineHungRedis(t *testing.T) {
	rs := testredis.Start(t)
	r := newRedisOpts(t, rs, nil, true)
	rate := policy.Rate{Name: "reads", Limit: 1000, Period: time.Minute}
	if _, err := r.Allow(one("vg:{v:h}:reads", rate)); err != nil {
		t.Fatal(err)
	}
	rs.Pause()
	defer rs.Resume()
	const n = 32
	concurrently(n, func(i int) {
		start := time.Now()
		_, err := r.Allow(one(fmt.Sprintf("vg:{v:h%d}:reads", i), rate))
		if !errors.Is(err, ErrUnavailable) {
			t.Errorf("caller %d: %v", i, err)
		}
		if d := time.Since(start); d > 500*time.Millisecond { // 50ms timeout; generous for -race
			t.Errorf("caller %d answered after %s", i, d)
		}
	})
}

// TestPipelineNoScriptAndClose: a Redis that lost its scripts is answered
// with EVAL; after Close calls fail closed.
func TestPipelineNoScriptAndClose(t *testing.T) {
	rs := testredis.Start(t)
	r := newRedisOpts(t, rs, nil, true)
	rate := policy.Rate{Name: "reads", Limit: 10, Period: time.Minute}
	for i := 0; i < 3; i++ {
		rs.Do(t, "SCRIPT", "FLUSH")
		d, err := r.Allow(one("vg:{v:ns}:reads", rate))
		if err != nil || !d.Allowed || d.Results[0].Remaining != 9-i {
			t.Fatalf("after SCRIPT FLUSH: %+v %v", d, err)
		}
	}
	r.Close()
	if _, err := r.Allow(one("vg:{v:ns}:reads", rate)); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("after Close: %v", err)
	}
}
