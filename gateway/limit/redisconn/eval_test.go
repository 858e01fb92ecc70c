package redisconn

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"vendorgate/shared/testredis"
)

// TestEvalSharesTheRoundTrip: calls with scripts of their own (Eval: a
// quota's, a slot's) queued beside calls of the Conn's script (Do) go in
// one round trip, each answered its own reply as Redis gave it (an array,
// an integer), and the merged calls their own values, as before.
func TestEvalSharesTheRoundTrip(t *testing.T) {
	rs := testredis.Start(t)
	c := redis.NewClient(&redis.Options{Addr: rs.Addr(), MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true,
		ReadTimeout: time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { c.Close() })
	h, err := NewHealth(HealthOptions{BreakerOpenFor: time.Second, BreakerFailures: 3, BreakerWindow: time.Second, BreakerFailureRatio: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	// The Conn's script answers, per call, its first key's name (one value
	// a call); the calls' layout as the batch lays it out: the number of
	// keys, then the arguments.
	merged := redis.NewScript(`local out, k, a = {}, 1, 1
while a <= #ARGV do
  local n = tonumber(ARGV[a]); out[#out + 1] = KEYS[k]; k = k + n; a = a + 1
end
return out`)
	array := redis.NewScript(`return {KEYS[1], ARGV[1]}`)
	integer := redis.NewScript(`return tonumber(ARGV[1]) * 2`)
	clk := &lateClock{SystemClock: SystemClock{Epoch: time.Now()}, waitFor: 2 * time.Second, armed: make(chan struct{}, 64)}
	conn, err := New(Options{Client: c, Script: merged, Timeout: 2 * time.Second, WireTimeout: 2 * time.Second,
		BusyTimeout: 2 * time.Second, Pipeline: true, PipelineMax: 16, PipelineSenders: 1, TickSlack: 2 * time.Millisecond},
		h, clk)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	// A lead call is taken by the sender, which holds its batch (entered)
	// until hold is closed; the calls started after it queue behind it.
	// (Started together, the sender could take several of them into the
	// held batch, whose size no one can know: under load the test waited
	// for a queue that never filled.)
	hold, entered := make(chan struct{}), make(chan struct{})
	var once sync.Once
	conn.batch.beforeSend = func() { once.Do(func() { close(entered); <-hold }) }
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	wg.Add(1)
	go func() {
		defer wg.Done()
		call := conn.Call()
		call.Keys[0], call.NKeys = "lead", 1
		call.Args[0], call.NArgs, call.NValues = 1, 1, 1
		if v, err := conn.Do(call); err != nil || len(v) != 1 || v[0] != "lead" {
			errs <- fmt.Errorf("lead call: %v %v", v, err)
		}
	}()
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		close(hold)
		t.Fatal("the sender never took the lead call")
	}
	const n = 4
	for i := 0; i < n; i++ {
		wg.Add(3)
		go func() {
			defer wg.Done()
			call := conn.Call()
			call.Keys[0], call.NKeys = fmt.Sprintf("merged%d", i), 1
			call.Args[0], call.NArgs, call.NValues = 1, 1, 1
			if v, err := conn.Do(call); err != nil || len(v) != 1 || v[0] != fmt.Sprintf("merged%d", i) {
				errs <- fmt.Errorf("merged call %d: %v %v", i, v, err)
			}
		}()
		go func() {
			defer wg.Done()
			call := conn.Call()
			call.Script = array
			call.Keys[0], call.NKeys = fmt.Sprintf("array%d", i), 1
			call.Args[0], call.NArgs = i, 1
			raw, err := conn.Eval(call)
			v, ok := raw.([]any)
			if err != nil || !ok || len(v) != 2 || v[0] != fmt.Sprintf("array%d", i) || v[1] != fmt.Sprint(i) {
				errs <- fmt.Errorf("array call %d: %#v %v", i, raw, err)
			}
		}()
		go func() {
			defer wg.Done()
			call := conn.Call()
			call.Script = integer
			call.Keys[0], call.NKeys = fmt.Sprintf("integer%d", i), 1
			call.Args[0], call.NArgs = i, 1
			if raw, err := conn.Eval(call); err != nil || raw != int64(2*i) {
				errs <- fmt.Errorf("integer call %d: %#v %v", i, raw, err)
			}
		}()
	}
	// Every call queued behind the held lead (the lead's wait and each
	// call's armed with its call queued). Bounded: a call that never
	// reaches the queue fails the test with what it answered.
	if !clk.queued(1+3*n, 30*time.Second) {
		queued := len(conn.batch.queue)
		close(hold)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		t.Fatalf("%d of %d calls queued behind the held sender after 30 s", queued, 3*n)
	}
	before := conn.batch.batches.Load()
	close(hold)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if b := conn.batch.batches.Load() - before; b > 2 {
		t.Errorf("%d round trips for %d calls queued together, want at most 2 (the lead held, the rest)", b, 3*n)
	}
	// A call of the Conn's script taken from the pool after an Eval is not
	// sent with the Eval's script.
	call := conn.Call()
	if call.Script != nil {
		t.Fatal("Call handed back a Script")
	}
}
