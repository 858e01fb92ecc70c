package redisconn

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"vendorgate/shared/testredis"
)

// TestPipelineReusesCallsSafely: callers that call again and again reuse
// pooled calls; a caller must be done with its call before another takes
// it (go test -race fails otherwise: the gateway built with -race exited on
// this under a steady load).
func TestPipelineReusesCallsSafely(t *testing.T) {
	rs := testredis.Start(t)
	patient := 2 * time.Second // -race on a busy machine
	c := newTestConn(t, rs.Addr(), connSettings{timeout: patient, wire: patient, busy: patient})
	concurrently(16, func(i int) {
		for j := range 100 {
			if n, err := c.count(fmt.Sprintf("reuse%d", i)); err != nil || n != int64(j+1) {
				t.Errorf("caller %d call %d: count %d %v", i, j, n, err)
				return
			}
		}
	})
}

// TestPipelineBatches: calls that arrive while every sender is busy go
// together in the next pipeline (one sender here, to count exactly).
func TestPipelineBatches(t *testing.T) {
	rs := testredis.Start(t)
	const patient = 5 * time.Second
	c := newTestConn(t, rs.Addr(), connSettings{timeout: patient, wire: patient, busy: patient, max: 1024, senders: 1, queued: true})
	if _, err := c.count("b"); err != nil { // warm: connection and script
		t.Fatal(err)
	}
	c.clock.drain()
	before := c.batch.batches.Load()
	sending := make(chan struct{}, 1)
	c.batch.beforeSend = func() {
		select {
		case sending <- struct{}{}:
		default:
		}
	}
	rs.Pause()
	done := make(chan error, 1)
	go func() { _, err := c.count("b"); done <- err }()
	<-sending // the first call's pipeline is in flight
	const n = 40
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() { _, err := c.count("b"); errs <- err }()
	}
	// The first call's wait and the n calls', each armed with its call
	// queued.
	if !c.clock.queued(n+1, patient) {
		t.Fatalf("%d calls not queued within %s", n, patient)
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
	if got := c.batch.batches.Load() - before; got != 2 {
		t.Fatalf("%d pipelines for 1 + %d calls, want 2", got, n)
	}
}

// TestPipelineHungRedis: with Redis hung, every waiting caller fails
// closed (unavailable) within its timeout (and a second look).
func TestPipelineHungRedis(t *testing.T) {
	rs := testredis.Start(t)
	// A 250ms wire deadline: a node that runs late (a loaded test machine)
	// leaves a silent Redis' verdict to it, within the test's 500ms bound.
	c := newTestConn(t, rs.Addr(), connSettings{wire: 250 * time.Millisecond})
	if _, err := c.count("h"); err != nil {
		t.Fatal(err)
	}
	rs.Pause()
	defer rs.Resume()
	const n = 32
	concurrently(n, func(i int) {
		start := time.Now()
		if _, err := c.count(fmt.Sprintf("h%d", i)); !unavailable(err) {
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
	c := newTestConn(t, rs.Addr(), connSettings{wire: 250 * time.Millisecond})
	for i := 0; i < 3; i++ {
		rs.Do(t, "SCRIPT", "FLUSH")
		if n, err := c.count("ns"); err != nil || n != int64(i+1) {
			t.Fatalf("after SCRIPT FLUSH: count %d %v", n, err)
		}
	}
	c.Close()
	if _, err := c.count("ns"); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}
