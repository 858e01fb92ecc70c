// Package redisconn is the rate limiter's way to Redis: it sends script
// calls (keys and arguments) and hands back raw replies, and judges
// whether Redis answers. It knows nothing of limits, buckets or decisions:
// what a call asks and what its reply means are the caller's
// (gateway/limit).
//
// What it does, by file:
//   - conn.go: Conn, one call alone or through the pipeline, a batch of
//     scripts (refunds), a ping of every node.
//   - pipeline.go: the batcher (auto-pipelining: concurrent calls sent as
//     one round trip), how a caller waits and whom it blames.
//   - conns.go, peek_*.go: the sockets' evidence (what was written, what
//     read, what waits unread: peeked at a socket, told by a connection
//     that is none) that tells a silent Redis from a late node.
//   - lateness.go: the node's on-time clock: whether it ran on time through
//     the last second (every tick within TickSlack), and Redis' slowest
//     answer of that second, the only grace a silent Redis gets. Only a
//     node on time calls Redis down by its own clock; a late one leaves the
//     verdict to the wire deadline (WireTimeout).
//   - failure.go: Health (the breaker over round trips and the hooks told
//     of failures), how a failure is classified, ErrBusy.
//   - slot.go: Redis Cluster's hash slot of a key.
//
// Its tests, over a real Redis (shared/testredis): harness_test.go builds
// a Conn as the gateway does, on a counting script; busy_test.go holds the
// transport to its two promises (no failure while Redis answers within
// its rule: a late sender, reader, writer or node; a failure within the
// wire deadline when Redis is silent: paused, killed, black-holed), its
// late sender, reader and writer in a testing/synctest bubble over the
// simulated Redis of sim_test.go; pipeline_test.go and eval_test.go the
// batching; conns_test.go and lateness_test.go the evidence and the
// on-time clock (a stepped clock; a bubble). sim_test.go is their
// deterministic complement: the same Conn in a bubble, on the bubble's
// clock and a Clock of its own, over a Redis simulated at the
// connection, each run (delays, pauses, a late or stalled node, a full
// pool, the lease loop's heartbeats and refunds, the silence it ends in)
// drawn from a seed and held to the same two promises, the heartbeats'
// verdicts too (go test -run TestSimulation -sim.seed N replays one).
package redisconn

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The errors a caller tells apart (see pipeline.go): a call after Close;
// a caller's wait that ran out while Redis answered nobody (Redis down or
// hung: fail closed); a round trip whose reply waited unread past its
// wire deadline (the gateway read late).
var (
	ErrClosed   = errClosed
	ErrSilent   = errSilent
	ErrReadLate = errReadLate
)

// ReplyLate reports whether err is a round trip the gateway read or wrote
// late, or a heartbeat that got no pooled connection or no verdict within
// BusyTimeout (see Heartbeat): not Redis' failure.
func ReplyLate(err error) bool { return replyLate(err) }

// Clock is the transport's time: monotonic nanoseconds (the sockets'
// evidence, a caller's wait, the on-time clock), so that a wall clock
// stepped by the system moves none of it, and the timers a caller's wait
// and the on-time probe run on. The gateway's is the system's
// (SystemClock); a simulation brings its own, whose timers fire as late as
// the node it plays. (A round trip's wire deadline is a socket's, on the
// wall clock.)
type Clock interface {
	Nanotime() int64
	// NewTimer is a stopped timer.
	NewTimer() Timer
}

// Timer is a Clock's timer, reused: Reset arms it to send on Chan after
// d, Stop disarms it; either leaves no tick of an earlier arming to be
// read from Chan (as time.Timer's).
type Timer interface {
	Chan() <-chan time.Time
	Reset(d time.Duration) bool
	Stop() bool
}

// SystemClock is the system's monotonic time since Epoch, and its timers.
type SystemClock struct{ Epoch time.Time }

// Nanotime is the time since Epoch.
func (c SystemClock) Nanotime() int64 { return int64(time.Since(c.Epoch)) }

// NewTimer is a stopped timer of the system's.
func (SystemClock) NewTimer() Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return systemTimer{t}
}

// systemTimer is a *time.Timer as a Timer.
type systemTimer struct{ *time.Timer }

func (t systemTimer) Chan() <-chan time.Time { return t.Timer.C }

// Options configure a Conn. Every duration and count it uses is required
// (config holds their defaults): New refuses a zero.
type Options struct {
	// Client is a plain, Sentinel or Cluster client. It should have
	// MaxRetries -1 (a retried EVALSHA can charge a bucket twice) and
	// DialerRetries 1 (go-redis' default of 5, 100 ms apart, spends a
	// heartbeat's whole deadline dialling a Redis that refuses: it fails
	// as a timeout, late, instead of at once).
	Client redis.UniversalClient
	// Script is what every call runs (see Call for how a batch of calls
	// is laid out).
	Script *redis.Script
	// Timeout is how long a call waits on a silent Redis: past it, with no
	// answer from Redis to anyone meanwhile, the call fails.
	Timeout time.Duration
	// WireTimeout bounds one pipelined round trip on the wire (its socket
	// deadline, set when the batch is sent); past it the round trip is one
	// failure for the breaker. At least Timeout: a sender that got its
	// core late must find the reply still readable, not an i/o timeout
	// with the reply already in the socket buffer. The client should have
	// ReadTimeout and WriteTimeout at least this long.
	WireTimeout time.Duration
	// BusyTimeout is how long in all a call may wait while Redis is
	// visibly answering (round trips answered meanwhile) though its own
	// Timeout passed: the node is busy, not Redis. Past it the call fails
	// with ErrBusy. At least Timeout.
	BusyTimeout time.Duration
	// Pipeline sends the calls of concurrent callers together, as one
	// pipelined write of script calls answered in one read (see batcher).
	// Off: one round trip per call on its own pooled connection (Once).
	Pipeline bool
	// PipelineMax bounds the calls in one pipeline (with Pipeline).
	PipelineMax int
	// PipelineSenders is how many pipelines may be in flight at once (with
	// Pipeline).
	PipelineSenders int
	// TickSlack is how late the node's 5ms scheduling probe may wake and
	// still count as on time (with Pipeline): only a node on time through
	// the last second calls a silent Redis down at Timeout; a late one
	// leaves the verdict to WireTimeout (see lateness and batcher.silent).
	TickSlack time.Duration
}

// Conn is the limiter's connection to Redis: a client, its breaker
// (Health), and with Pipeline the batcher and its sockets' evidence.
type Conn struct {
	client  redis.UniversalClient
	script  *redis.Script
	timeout time.Duration
	health  *Health
	clock   Clock
	batch   *batcher // nil without Pipeline
}

// New returns a Conn over o.Client, reporting round trips to h; with
// Pipeline it starts the senders (stopped by Close). It refuses settings
// it cannot use.
func New(o Options, h *Health, clk Clock) (*Conn, error) {
	switch {
	case o.Client == nil:
		return nil, errors.New("redisconn: redis client required")
	case o.Script == nil:
		return nil, errors.New("redisconn: script required")
	case h == nil:
		return nil, errors.New("redisconn: health required")
	case o.Pipeline && o.PipelineMax <= 0:
		return nil, fmt.Errorf("redisconn: pipeline max %d must be positive", o.PipelineMax)
	case o.Pipeline && o.PipelineSenders <= 0:
		return nil, fmt.Errorf("redisconn: pipeline senders %d must be positive", o.PipelineSenders)
	case o.Pipeline && o.TickSlack <= 0:
		return nil, fmt.Errorf("redisconn: tick slack %s must be positive", o.TickSlack)
	}
	if err := CheckTimeouts(o.Timeout, o.WireTimeout, o.BusyTimeout); err != nil {
		return nil, err
	}
	c := &Conn{client: o.Client, script: o.Script, timeout: o.Timeout, health: h, clock: clk}
	if o.Pipeline {
		c.batch = newBatcher(o.Client, &o, h, clk)
	}
	return c, nil
}

// CheckTimeouts refuses a caller's wait, wire deadline and busy bound
// that cannot be used: the wait must be positive, the others at least it.
func CheckTimeouts(timeout, wire, busy time.Duration) error {
	switch {
	case timeout <= 0:
		return fmt.Errorf("redisconn: timeout %s must be positive", timeout)
	case wire < timeout:
		return fmt.Errorf("redisconn: wire timeout %s must be at least the timeout %s", wire, timeout)
	case busy < timeout:
		return fmt.Errorf("redisconn: busy timeout %s must be at least the timeout %s", busy, timeout)
	}
	return nil
}

// Call is a Call to fill and pass to Do (with Pipeline) or Eval, its
// Script nil.
func (c *Conn) Call() *Call {
	if c.batch == nil {
		return new(Call)
	}
	return c.batch.call()
}

// Do runs the script for call through the next batch (with Pipeline) and
// returns its part of the raw reply; call is not the caller's any more.
// It returns within Timeout when Redis is silent (ErrSilent), and within
// BusyTimeout whatever happens (ErrBusy: the node is late, not Redis).
func (c *Conn) Do(call *Call) ([]any, error) {
	r := c.batch.do(call)
	return r.v, r.err
}

// Eval runs call.Script (required) for call's keys and arguments as they
// are and returns Redis' whole reply (with Merge, the call's values of
// its batch's reply); call is not the caller's any more.
// With Pipeline it goes as one script call of the next batch, under the
// rule the limiter's own calls keep (see Do and batcher: the wire
// deadline, the on-time clock, the reply already waiting); without, alone
// as Once. It is for the other limiters sharing the limiter's Redis and
// breaker (quotas, sliding windows, concurrency slots). A call shed
// (ErrBusy) is told to the hooks.
func (c *Conn) Eval(call *Call) (any, error) {
	if call.Script == nil {
		return nil, errors.New("redisconn: eval without a script")
	}
	var r reply
	if c.batch == nil {
		args := call.Args[:call.NArgs]
		if call.Merge { // the batch's form, of one call
			args = append([]any{call.NKeys}, args...)
		}
		var cmd *redis.Cmd
		if cmd, r.err = c.once(call.Script, call.Keys[:call.NKeys], args); r.err == nil {
			r.raw, r.err = cmd.Result()
		}
	} else {
		r = c.batch.do(call)
	}
	if r.err != nil && errors.Is(r.err, ErrBusy) {
		c.health.Busy()
	}
	return r.raw, r.err
}

// Once runs the script for keys and args on a connection of its own,
// bounded by Timeout: one round trip, one outcome for the breaker. (A
// caller is its own sender: a busy node's late caller still counts a late
// round trip, among the window's others.) A wait for a pooled connection
// that ran out is this gateway's overload: ErrBusy, not Redis' failure.
func (c *Conn) Once(keys []string, args []any) ([]any, error) {
	cmd, err := c.once(c.script, keys, args)
	if err != nil {
		return nil, err
	}
	return cmd.Slice()
}

// once is Once of script.
func (c *Conn) once(script *redis.Script, keys []string, args []any) (*redis.Cmd, error) {
	done, err := c.health.cb.Allow()
	if err != nil {
		return nil, fmt.Errorf("breaker %s: %w", BreakerName, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	cmds, err := runScripts(ctx, c.client, script, nil, [][]string{keys}, [][]any{args}, make([]*redis.Cmd, 1), nil)
	done(err)
	if err != nil && poolWait(err) { // never sent: this gateway's overload
		return nil, fmt.Errorf("%w: %w", ErrBusy, err)
	}
	if err != nil {
		c.health.Failed(err)
		return nil, err
	}
	return cmds[0], nil
}

// Run runs the script once per group of keys and args (pipelined in one
// round trip, up to deadline) and returns each group's reply; a group
// whose script failed has none. It reports nothing to the breaker; with
// Pipeline a round trip that failed on the wire with Redis silent or gone
// is the verdict of the calls waiting meanwhile, as a batch's (see
// batcher.judge and batcher.owed).
func (c *Conn) Run(deadline time.Duration, keys [][]string, args [][]any) ([][]any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	var lateReads, lateWrites int64
	if c.batch != nil {
		lateReads, lateWrites = c.batch.conns.lateReads.Load(), c.batch.conns.lateWrites.Load()
	}
	cmds, err := runScripts(ctx, c.client, c.script, nil, keys, args, make([]*redis.Cmd, len(keys)), nil)
	if c.batch != nil {
		c.batch.onWire(err, lateReads, lateWrites) // its verdict shared; err returned as it was
	}
	out := make([][]any, len(cmds))
	for i, cmd := range cmds {
		out[i], _ = cmd.Slice()
	}
	return out, err
}

// Heartbeat asks every Redis the client reaches (each master of a
// Cluster) whether it answers, judged by the rule the calls keep (see
// batcher.heartbeat): its ping waits up to the wire deadline (WireTimeout)
// while it is judged as a caller's wait is (batcher.judge): a node that
// has run on time calls Redis silent past Timeout and Redis' slowest
// recent answer (Grace), a late node leaves the verdict to the wire. So a
// ping's pool wait, a dial and its handshake (two round trips), or its
// write or read that got its core late count as a call's do: never Redis'
// failure alone. An error that is not Redis' failure is ReplyLate (no
// verdict: the next heartbeat asks again): a reply that waited in a
// socket past the wire deadline, a request that reached its socket past
// it, a ping that got no pooled connection (the gateway's own calls hold
// them, or they wait on a Redis not judged silent), a wait past
// BusyTimeout on a node too late to judge. The wire deadline is on the
// wall clock (the on-time clock does not bound a socket's). Without
// Pipeline it waits Timeout.
func (c *Conn) Heartbeat() error {
	ping := func(ctx context.Context) error {
		if cl, ok := c.client.(*redis.ClusterClient); ok {
			return cl.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return n.Ping(ctx).Err() })
		}
		return c.client.Ping(ctx).Err()
	}
	if c.batch == nil {
		ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
		defer cancel()
		return ping(ctx)
	}
	return c.batch.heartbeat(ping)
}

// Heard is when a byte was last read from Redis, on any connection (the
// Clock's ns; with Pipeline, nil without).
func (c *Conn) Heard() *atomic.Int64 {
	if c.batch == nil {
		return nil
	}
	return &c.batch.conns.lastRead
}

// Lateness is the node's recent scheduling lateness: how late, at most,
// the gateway's goroutines woke over about the last second (a probe's
// short sleeps, callers' timers). Zero without Pipeline.
func (c *Conn) Lateness() time.Duration {
	if c.batch == nil {
		return 0
	}
	return c.batch.late.Lateness()
}

// OnTime reports whether the node has run on time through the last
// second, now: only such a node judges a silent Redis by its own clock
// (see batcher.silent); a late one leaves the verdict to the wire. True
// without Pipeline (nothing keeps the time).
func (c *Conn) OnTime() bool {
	if c.batch == nil {
		return true
	}
	return c.batch.late.OnTime(c.batch.conns.now())
}

// Grace is how much longer than Timeout a node that has run on time
// waits for a silent Redis before a call fails: the slowest answer Redis
// gave over the last second, capped so that the whole wait stays within
// BusyTimeout (see lateness). A fraction of a millisecond on a quiet
// node; zero without Pipeline.
func (c *Conn) Grace() time.Duration {
	if c.batch == nil {
		return 0
	}
	return c.batch.late.Grace()
}

// Close stops the pipelining goroutines (with Pipeline); calls still
// queued and calls made afterwards fail with ErrClosed. It does not close
// the client.
func (c *Conn) Close() {
	if c.batch != nil {
		c.batch.close()
	}
}
