package redisconn

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"vendorgate/config"
	"vendorgate/shared/testredis"
)

// TestClusterBatchKeepsTheAnsweringNodesReplies: one batch holds a call
// whose key is on a silent master and one whose key is on a master that
// answers. The second caller gets its count; the first fails. (go-redis
// retries a Cluster pipeline's failed part after a backoff. With the
// deadline past by then, it set that error on every command of the
// pipeline: the answering node's reply was lost, and its caller refused
// as if Redis were down. With the backoff over first, the retry's write
// came past the deadline, and the whole batch was shed as the gateway's
// lateness, the answered group too.)
func TestClusterBatchKeepsTheAnsweringNodesReplies(t *testing.T) {
	cl := testredis.StartCluster(t)
	cl.WaitOK(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), MaxRetries: -1, ContextTimeoutEnabled: true,
		ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	t.Cleanup(func() { c.Close() })
	d := config.DefaultGateway().Redis
	h, err := NewHealth(HealthOptions{BreakerOpenFor: d.BreakerOpenFor, BreakerFailures: d.BreakerFailures,
		BreakerWindow: d.BreakerWindow, BreakerFailureRatio: float64(d.BreakerFailurePercent) / 100})
	if err != nil {
		t.Fatal(err)
	}
	const timeout = 100 * time.Millisecond
	clk := &lateClock{SystemClock: SystemClock{Epoch: time.Now()}, waitFor: timeout, armed: make(chan struct{}, 64)}
	conn, err := New(Options{Client: c, Script: counter, Timeout: timeout, WireTimeout: 300 * time.Millisecond,
		BusyTimeout: 2 * time.Second, Pipeline: true, PipelineMax: 16, PipelineSenders: 1, TickSlack: d.TickSlack}, h, clk)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	// Two keys on two masters: silent's is paused, answering's answers.
	const silent = "{s}:n"
	node := cl.NodeFor(t, silent)
	answering := ""
	for i := 0; answering == ""; i++ {
		if k := fmt.Sprintf("{a%d}:n", i); cl.NodeFor(t, k) != node {
			answering = k
		}
	}
	for _, k := range []string{silent, answering} { // each node's connection made
		if _, err := count(conn, k); err != nil {
			t.Fatal(err)
		}
	}

	// The one sender holds a lead call's batch while the two calls queue
	// behind it: they go in the next batch, together.
	hold, entered := make(chan struct{}), make(chan struct{})
	var once sync.Once
	conn.batch.beforeSend = func() { once.Do(func() { close(entered); <-hold }) }
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := count(conn, answering); err != nil {
			t.Errorf("lead call: %v", err)
		}
	}()
	<-entered
	clk.drain()
	node.Pause()
	defer node.Resume()
	var silentErr, answeringErr error
	var answered int64
	var silentDone atomic.Bool
	answeredDone := make(chan struct{})
	wg.Add(2)
	go func() { defer wg.Done(); _, silentErr = count(conn, silent); silentDone.Store(true) }()
	go func() { defer wg.Done(); answered, answeringErr = count(conn, answering); close(answeredDone) }()
	if !clk.queued(2, 30*time.Second) {
		close(hold)
		t.Fatal("the two calls were not queued")
	}
	close(hold)
	// The answering master's reply goes out as its node answers: before
	// the silent master's caller has an outcome (its timeout at the
	// earliest, on a node on time; the wire deadline on a late one).
	// Handed out with the batch instead, at the silent master's wire
	// deadline, it came after that caller's refusal, and its caller's own
	// timer could end first and find Redis called silent.
	<-answeredDone
	if silentDone.Load() {
		t.Error("the answering master's caller got its outcome only after the silent master's caller: its reply waited for the batch")
	}
	wg.Wait()
	if answeringErr != nil || answered != 3 {
		t.Errorf("the answering master's caller: count %d, %v; want 3 (its third call), no error", answered, answeringErr)
	}
	// The silent master's caller fails; as Redis unavailable, or shed as
	// busy when go-redis' retry of its part wrote past the deadline (that
	// retry's write is counted as the gateway's lateness).
	if silentErr == nil {
		t.Error("the silent master's caller got an answer")
	}
}
