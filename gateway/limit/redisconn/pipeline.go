package redisconn

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// errClosed answers calls made after Close.
var errClosed = errors.New("limiter closed")

// errReadLate marks a round trip whose wire deadline passed with Redis'
// reply already waiting unread: the node read late.
var errReadLate = errors.New("redis reply waiting unread past the wire deadline (the gateway read late)")

// errWriteLate marks a round trip whose request reached the socket only
// after the wire deadline and was not written: Redis was never asked.
var errWriteLate = errors.New("redis request not written before the wire deadline (the gateway wrote late)")

// errBeatBusy marks a heartbeat that waited BusyTimeout without a
// verdict (see batcher.heartbeat): the node too late to judge Redis.
var errBeatBusy = errors.New("redis ping unanswered within the busy timeout on a node too late to judge redis")

// errNoConn marks a heartbeat whose ping got no pooled connection in time
// (see batcher.heartbeat): Redis was not asked, and not judged silent.
var errNoConn = errors.New("redis ping got no pooled connection in time (the gateway's connections all in use)")

// replyLate reports whether err is a round trip's or a heartbeat's of the
// four above: the node's lateness or its own connections, not Redis'.
func replyLate(err error) bool {
	return errors.Is(err, errReadLate) || errors.Is(err, errWriteLate) || errors.Is(err, errBeatBusy) ||
		errors.Is(err, errNoConn)
}

// poolWait reports whether err is a wait for a connection of the client's
// own pool that ran out (every connection in use by this gateway): nothing
// was asked of Redis, so it says nothing of Redis. Counted as Redis
// failing, a local flood of calls would open the breaker for everyone.
func poolWait(err error) bool { return errors.Is(err, redis.ErrPoolTimeout) }

// notRedis reports whether err is the gateway's own doing, excluded from
// the breaker: a reply read late, a wait for a pooled connection.
func notRedis(err error) bool { return replyLate(err) || poolWait(err) }

// errSilent answers a caller whose wait ran out while Redis gave no answer
// to anyone: Redis is down or hung, and the request fails closed.
var errSilent = fmt.Errorf("no answer from redis within the limiter timeout: %w", context.DeadlineExceeded)

// batcher is auto-pipelining for the limiter's script: concurrent callers
// enqueue their call, one goroutine takes whatever is queued (up to max)
// and sends it as ONE pipeline of EVALSHA calls, one write and one read for
// the lot, then hands each caller its own reply. A lone caller is one round
// trip as without it. Under load this trades one syscall pair and one
// connection per request for one per batch, which is most of what a limiter
// call costs on both ends.
//
// How it waits, and whom it blames. A busy node (a CPU quota, neighbours
// spinning on every core) runs the senders and the callers late: a reply
// can sit in the socket buffer while the gateway is not scheduled. So the
// batcher judges Redis by what Redis did, not by how late the gateway ran:
//
//   - The wire: a round trip has a deadline of its own (wire, longer than
//     a caller's wait), set when it is sent, not the deadline of one of its
//     callers. Each round trip is ONE outcome for the breaker, reported by
//     the sender that made it (a TwoStepCircuitBreaker): a batch of fifty
//     late callers is one late round trip, not fifty failures, and a call
//     never sent (its caller gave up first) is no outcome at all.
//   - The caller: it waits up to timeout for its reply, then judges the
//     evidence, taken at the sockets (conns), if the node has run on time
//     through the last second (see lateness; a late node leaves the
//     verdict to the wire deadline). Redis is silent when a request was
//     written to it timeout ago or more, plus the slowest answer Redis
//     gave in the last second, counted on the node's on-time clock, no
//     byte has been read from Redis since, and no reply waits unread in a
//     limiter connection's socket buffer (replies arriving on its
//     connection);
//     seen twice, a moment apart (the second look lets a sender that was
//     just woken read what is already there), the caller fails closed
//     (ErrSilent: 503 rate_limit_unavailable): on a quiet node a few milliseconds past
//     timeout, as before. Anything else is the node's doing, and the
//     caller waits on, in steps of timeout/2, up to busy in all: nothing
//     written yet (the senders got no core yet), replies arriving, or its
//     own timer fired late (the node stalled: its clock says nothing of
//     Redis). A caller that reaches busy without a silent Redis gives up
//     with ErrBusy (the node cannot keep up: shed as 503 request_failed),
//     never with ErrUnavailable.
//   - A read that runs past the wire deadline with Redis' reply already
//     waiting in the socket (conns peeks at a read that timed out) takes
//     the reply: Redis answered in time, and its callers get their
//     decisions. Should the waiting bytes not be taken after all, the
//     round trip was the node's lateness, not Redis': excluded from the
//     breaker, and its callers fail with ErrBusy. So is a round trip whose
//     request reached its socket only after the deadline and was not
//     written (conns notes the write deadline): Redis was never asked.
//   - A caller that gives up before its call was sent takes it back: the
//     senders skip it, so it is neither sent nor charged. Nothing is
//     retried (the client has MaxRetries -1).
//   - A batch whose sender got no pooled connection within the client's
//     PoolTimeout was never sent: no outcome for the breaker. Its callers
//     are shed (ErrBusy: the gateway's own calls hold the pool), unless
//     Redis owes an answer (a request unanswered on a connection, or a
//     round trip failed on the wire with nothing read since): then the
//     pool is full of connections waiting on Redis, the calls go back to
//     their callers to be queued again, and the rule above decides.
//
// A few senders work the queue, so that a few callers at a time (light
// load) each go at once as before rather than waiting for one another.
type batcher struct {
	client  redis.UniversalClient
	timeout time.Duration // a caller's wait on a silent Redis
	wire    time.Duration // one round trip's deadline
	busy    time.Duration // a caller's wait in all while Redis answers
	max     int
	script  *redis.Script
	health  *Health
	conns   *conns
	clock   Clock     // a caller's wait and the sockets' evidence
	late    *lateness // the node's recent scheduling lateness
	queue   chan *Call
	// waiting holds, in the order they came, the calls that found the
	// queue full (enqueue); the senders move them into the queue as it
	// drains (refill), so that a caller waiting for room keeps its place
	// whatever its own wait does meanwhile. nWaiting is its length.
	waitMu   sync.Mutex
	waiting  []*Call
	nWaiting atomic.Int64
	stop     chan struct{}
	done     chan struct{}
	once     sync.Once
	calls    sync.Pool
	// cluster groups a batch by hash slot: one script's keys share a slot.
	cluster bool
	// beforeSend, when set (tests only), runs in the sender before it sends
	// a batch: a sender that got its core late.
	beforeSend func()
	// wireDown is when (clock's ns) a round trip last failed on the wire
	// with Redis silent (a timeout or a broken connection, no reply
	// waiting): the verdict every caller already waiting shares while
	// nothing has been read from Redis since (see judge).
	wireDown atomic.Int64
	// batches counts pipelines sent, for tests.
	batches atomic.Uint64
}

// A call's state: queued until a sender takes it (sent) or its caller
// gives up first (withdrawn); whoever moves it first decides.
const (
	callQueued int32 = iota
	callSent
	callWithdrawn
)

// The most keys, and arguments, one call may carry: four arguments a key
// and two of the call's own (a call with a script of its own: a window's
// charge).
const (
	MaxKeys = 16
	MaxArgs = 4*MaxKeys + 2
)

// Call is one caller's script call (its keys, its arguments, how many
// values of the batch's reply are its own) and the channel its reply
// arrives on. A batch's script sees every call's keys in call order as
// KEYS, and as ARGV, per call, its number of keys then its arguments; it
// answers the calls' values in call order. A call with a Script of its own
// (see Conn.Eval) is not merged: it is one script call of the batch's
// round trip, KEYS its keys and ARGV its arguments as they are, and its
// whole reply is its own; unless Merge says its script takes the batch's
// form, as the Conn's does: it is then merged with the calls of the same
// script in its batch (with Redis Cluster, of its hash slot), and its
// NValues values of the reply are its own. A call is reused (calls pool) only by a caller
// that got its reply or never queued it; one that gave up leaves it to the
// garbage collector, since a sender may still hold it.
type Call struct {
	Keys    [MaxKeys]string
	Args    [MaxArgs]any
	NKeys   int // Keys[:NKeys] are the call's
	NArgs   int // Args[:NArgs] are the call's
	NValues int // the values of the reply that are the call's
	// Script, when set (Eval), is the call's own script; nil: the Conn's,
	// merged with the batch's other calls (Do). Merge: Script takes the
	// batch's form (see above). Conn.Call clears both.
	Script *redis.Script
	Merge  bool
	state  atomic.Int32
	reply  chan reply // capacity 1: the batch never blocks on a caller
	timer  Timer      // the caller's wait, on the Conn's clock
}

// reply is a call's answer: its values (Do), or with a script of its own
// its whole reply as Redis gave it (raw: a value or the values). again is
// no answer: the call was not sent (its batch got no pooled connection in
// time while Redis owed an answer, see send) and is its caller's again,
// to queue once more.
type reply struct {
	v     []any
	raw   any
	err   error
	again bool
}

func newBatcher(client redis.UniversalClient, o *Options, h *Health, clk Clock) *batcher {
	_, cluster := client.(*redis.ClusterClient)
	b := &batcher{client: client, timeout: o.Timeout, wire: o.WireTimeout, busy: o.BusyTimeout, max: o.PipelineMax,
		script: o.Script, health: h, conns: &conns{clock: clk}, clock: clk, cluster: cluster,
		late:  newLateness(latenessEvery, latenessWindow, o.TickSlack, o.BusyTimeout-o.Timeout, clk),
		queue: make(chan *Call, 4*o.PipelineMax), stop: make(chan struct{}), done: make(chan struct{})}
	b.conns.answered = b.late.noteAnswer
	b.conns.onTime = b.late.onTime
	b.conns.watch(client)
	b.late.start()
	b.calls.New = func() any { return &Call{reply: make(chan reply, 1), timer: clk.NewTimer()} }
	var wg sync.WaitGroup
	for i := 0; i < o.PipelineSenders; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.run()
		}()
	}
	go func() {
		wg.Wait()
		b.late.stop()
		close(b.done)
	}()
	return b
}

// close stops the batch goroutine and waits for it; calls still queued and
// calls made afterwards fail.
func (b *batcher) close() {
	b.once.Do(func() {
		close(b.stop)
		<-b.done
	})
}

// call is a Call for do, to be filled.
func (b *batcher) call() *Call {
	c := b.calls.Get().(*Call)
	c.Script, c.Merge = nil, false
	return c
}

// do runs the script for c (from call) through the next batch and returns
// its reply; c is not the caller's any more. It returns within timeout
// when Redis is silent, and within busy whatever happens.
func (b *batcher) do(c *Call) reply {
	select {
	case <-b.stop:
		return reply{err: errClosed}
	default: // a call racing close waits out its timeout at worst
	}
	c.state.Store(callQueued)
	start := b.clock.Nanotime()
	due := start + int64(b.timeout)
	// Queued first, then the wait armed: the clock's timer is armed with
	// the call in the queue (or waiting for room in it), so that a clock's
	// owner can tell calls queued behind a batch in flight.
	b.enqueue(c)
	c.timer.Reset(b.timeout)
	fired := c.timer.Chan()
	suspect := false // Redis looked silent at the last look
	for {
		select {
		case r := <-c.reply:
			if r.again { // not sent: queued again, the wait goes on
				c.state.Store(callQueued)
				b.enqueue(c)
				continue
			}
			c.timer.Stop()
			b.calls.Put(c) // a sender wrote its last: nobody else holds it
			return r
		case <-fired:
			now := b.clock.Nanotime()
			next, err := b.judge(start, due, now, &suspect)
			if err == nil {
				due = next
				c.timer.Reset(time.Duration(next - now))
				continue
			}
			return b.giveUp(c, err)
		case <-b.stop:
			c.timer.Stop()
			return b.giveUp(c, errClosed)
		}
	}
}

// judge is a caller's verdict when its wait (due, on the clock) is up at
// now: wait on until the returned time, or give up with the returned
// error. Redis must look silent at two looks in a row to fail the caller
// closed; a look taken on a timer that fired late counts for nothing (the
// node stalled). Past busy since start, a caller facing no silent Redis
// (on the on-time clock, whether or not the node ran on time) is shed. A
// round trip that failed on the wire since the caller began, with nothing
// read from Redis since and no reply waiting, is the caller's verdict
// too: a caller queued behind it on a late node is not sent into the same
// silence for a wire deadline of its own.
func (b *batcher) judge(start, due, now int64, suspect *bool) (int64, error) {
	stalled := now-due > int64(max(b.timeout/25, time.Millisecond))
	if stalled {
		b.late.note(time.Duration(now - due))
	}
	if down := b.wireDown.Load(); down > start && b.conns.lastRead.Load() < down && !b.conns.waiting() {
		return 0, errSilent
	}
	if now-start >= int64(b.busy) { // the last look, late or not: on the on-time clock alone
		if b.silentFor() {
			return 0, errSilent
		}
		return 0, ErrBusy
	}
	silent := !stalled && b.silent()
	if silent && *suspect {
		return 0, errSilent
	}
	*suspect = silent
	step := b.timeout / 2
	if silent {
		step = max(b.timeout/10, time.Millisecond) // the second look
	}
	return min(now+int64(step), start+int64(b.busy)), nil
}

// heartbeat is Conn.Heartbeat with Pipeline: ping (every node Redis has)
// bounded by the wire deadline, judged meanwhile as a caller's wait is
// (judge, from when it began), so that a ping is held to the calls' rule
// and nothing stricter:
//   - answered: nil; an error reply is Redis' answer, returned as it is.
//   - failed on the wire (a timeout or a broken connection): Redis'
//     failure, and the verdict of the calls waiting meanwhile, as a
//     batch's (wireDown), unless a reply waited unread past the deadline
//     or the request reached its socket past it (the node's lateness).
//   - its wait for a pooled connection ran out: Redis was not asked. When
//     Redis owes an answer (owed: the pool's connections wait on it), the
//     heartbeat waits on for the judge's verdict, up to the wire deadline
//     and a look: Redis silent by the rule (or a round trip failed on the
//     wire since, nothing read since) fails it; an answer read meanwhile,
//     or no verdict by then, is none (errNoConn: the next beat asks
//     again). When Redis owes nothing the gateway's own calls hold the
//     pool: no verdict either.
//   - the judge called Redis silent first: Redis' failure (errSilent),
//     the ping left to end by its deadline; no verdict within BusyTimeout
//     (a node late throughout): none (errBeatBusy).
//
// It is the lease loop's, never on a request's path: one goroutine and a
// timer a heartbeat.
func (b *batcher) heartbeat(ping func(context.Context) error) error {
	start := b.clock.Nanotime()
	lateReads, lateWrites := b.conns.lateReads.Load(), b.conns.lateWrites.Load()
	// The ping ends by its deadline, abandoned or not (never cancelled:
	// its outcome on the wire is a verdict the callers share).
	outcome := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), b.wire)
		defer cancel()
		outcome <- b.onWire(ping(ctx), lateReads, lateWrites)
	}()
	timer := b.clock.NewTimer()
	defer timer.Stop()
	timer.Reset(b.timeout)
	due := start + int64(b.timeout)
	suspect := false
	unasked := false // the ping got no pooled connection while Redis owed an answer
	var heard int64  // what had been read from Redis then (conns.lastRead)
	for {
		select {
		case err := <-outcome:
			switch {
			case err == nil || KindOf(err) == FailScript:
				return err
			case poolWait(err):
				if !b.owed() {
					return fmt.Errorf("%w: %w", errNoConn, err)
				}
				unasked, heard = true, b.conns.lastRead.Load()
				continue
			}
			return err
		case <-timer.Chan():
			now := b.clock.Nanotime()
			next, err := b.judge(start, due, now, &suspect)
			switch {
			case errors.Is(err, ErrBusy):
				return fmt.Errorf("%w: %w", errBeatBusy, err)
			case err != nil:
				return err
			case unasked && (b.conns.lastRead.Load() != heard || now-start >= int64(b.wire)):
				return fmt.Errorf("%w: %w", errNoConn, redis.ErrPoolTimeout)
			}
			due = next
			timer.Reset(time.Duration(next - now))
		}
	}
}

// onWire is a round trip's outcome err (a batch's, a heartbeat's ping,
// even one abandoned, Conn.Run's), judged where it ends: a timeout with a
// reply left unread, or a request unwritten, since lateReads and
// lateWrites were read is the node's lateness (errReadLate,
// errWriteLate); another failure on the wire is Redis silent or gone, the
// verdict the callers already waiting share (wireDown; see judge). An
// answer, an error reply and a pool wait are returned as they are.
func (b *batcher) onWire(err error, lateReads, lateWrites int64) error {
	down, err := b.wireOutcome(err, lateReads, lateWrites)
	if down {
		b.wireDown.Store(b.conns.now())
	}
	return err
}

// wireOutcome is onWire without telling the callers: whether err is a
// failure on the wire with Redis silent or gone (the verdict to store in
// wireDown), and the outcome.
func (b *batcher) wireOutcome(err error, lateReads, lateWrites int64) (bool, error) {
	switch {
	case err == nil || KindOf(err) == FailScript || poolWait(err):
		return false, err
	case KindOf(err) == FailTimeout && b.conns.lateReads.Load() != lateReads:
		return false, fmt.Errorf("%w: %w", errReadLate, err)
	case KindOf(err) == FailTimeout && b.conns.lateWrites.Load() != lateWrites:
		return false, fmt.Errorf("%w: %w", errWriteLate, err)
	}
	return true, err
}

// silent reports whether Redis is silent, as judged by a node that has
// run on time through the last second (every tick and caller's timer
// within the tick slack; a late node leaves the verdict to the wire: a
// round trip unanswered at its wire deadline): a request written to it
// timeout ago or more, plus the slowest answer it gave in the last
// second, on the node's on-time clock, no byte read from it since, and no
// reply waiting unread (see conns). On a quiet node the addition is about
// zero: a dead Redis is called dead at about timeout.
func (b *batcher) silent() bool { return b.late.OnTime(b.conns.now()) && b.silentFor() }

// silentFor is silent without asking whether the node ran on time: the
// last look of a caller that waited busy in all (a node late throughout,
// whose round trip has not failed on the wire by then).
func (b *batcher) silentFor() bool { return b.conns.silent(b.timeout + b.late.Grace()) }

// enqueue queues c behind every call queued before it: when the queue is
// full, c waits for room in b.waiting, in the order the calls came. (A
// caller that waited for room on the channel itself lost its place each
// time its own wait woke it to judge Redis, and went back behind the
// callers that came since: under a backlog one could be overtaken until
// it was shed as busy while Redis answered.) nWaiting is stored before
// the send is tried, so that a sender that takes from the full queue
// after the try sees it and refills.
func (b *batcher) enqueue(c *Call) {
	if b.nWaiting.Load() == 0 {
		select {
		case b.queue <- c:
			return
		default:
		}
	}
	b.waitMu.Lock()
	b.waiting = append(b.waiting, c)
	b.nWaiting.Store(int64(len(b.waiting)))
	b.refillLocked()
	b.waitMu.Unlock()
}

// refill moves waiting calls into the queue, first come first, as far as
// there is room; a sender calls it after each take.
func (b *batcher) refill() {
	if b.nWaiting.Load() == 0 {
		return
	}
	b.waitMu.Lock()
	b.refillLocked()
	b.waitMu.Unlock()
}

func (b *batcher) refillLocked() {
	n := 0
fill:
	for n < len(b.waiting) {
		if c := b.waiting[n]; c.state.Load() != callWithdrawn { // a withdrawn call is dropped
			select {
			case b.queue <- c:
			default:
				break fill
			}
		}
		n++
	}
	rest := copy(b.waiting, b.waiting[n:])
	clear(b.waiting[rest:])
	b.waiting = b.waiting[:rest]
	b.nWaiting.Store(int64(rest))
}

// giveUp ends a caller's wait with err. A call still queued (or waiting
// for room) is withdrawn (never sent, not charged, counted); one a sender
// already took is left to it: its reply, if it came meanwhile, is taken
// after all.
func (b *batcher) giveUp(c *Call, err error) reply {
	if c.state.CompareAndSwap(callQueued, callWithdrawn) {
		b.health.hooks.onUnsent() // the sender that meets it skips it
		return reply{err: err}
	}
	select {
	case r := <-c.reply: // answered meanwhile: this goroutine only ran late
		b.calls.Put(c)
		if r.again { // handed back unsent
			b.health.hooks.onUnsent()
			return reply{err: err}
		}
		return r
	default:
		return reply{err: err} // c is abandoned to the batch
	}
}

// run is one sender: it takes the first queued call, whatever else is
// queued by then, and sends them. With every sender busy the queue grows,
// and the next free sender takes it whole: batches grow with the load.
func (b *batcher) run() {
	batch := make([]*Call, 0, b.max)
	var buf sendBuf
	for {
		select {
		case c := <-b.queue:
			batch = append(batch[:0], c)
		case <-b.stop:
			b.drain()
			return
		}
	fill:
		for len(batch) < b.max {
			select {
			case c := <-b.queue:
				batch = append(batch, c)
			default:
				break fill
			}
		}
		b.refill()
		b.send(batch, &buf)
		clear(batch) // drop references to calls handed back
		buf.clear()
	}
}

// drain fails what is still queued, or waiting for room, at close.
func (b *batcher) drain() {
	b.waitMu.Lock()
	for _, c := range b.waiting {
		if c.state.CompareAndSwap(callQueued, callSent) {
			c.reply <- reply{err: errClosed}
		}
	}
	clear(b.waiting)
	b.waiting = b.waiting[:0]
	b.nWaiting.Store(0)
	b.waitMu.Unlock()
	for {
		select {
		case c := <-b.queue:
			if c.state.CompareAndSwap(callQueued, callSent) {
				c.reply <- reply{err: errClosed}
			}
		default:
			return
		}
	}
}

// send makes one round trip for the callers of batch still waiting: ONE
// script call for the whole batch (with Redis Cluster, one per hash slot,
// pipelined), and a second round trip only for NOSCRIPT (a Redis that lost
// its scripts: EVAL loads it again). The round trip is one outcome for the
// breaker; with the breaker open (or its one half-open probe in flight) the
// batch is not sent and its callers fail closed.
func (b *batcher) send(batch []*Call, buf *sendBuf) {
	if b.beforeSend != nil {
		b.beforeSend()
	}
	live := batch[:0]
	for _, c := range batch {
		if c.state.CompareAndSwap(callQueued, callSent) {
			live = append(live, c)
		} // else its caller gave up first: not sent, not charged
	}
	if len(live) == 0 {
		return
	}
	done, err := b.health.cb.Allow()
	if err != nil {
		err = fmt.Errorf("breaker %s: %w", BreakerName, err)
		for _, c := range live {
			c.reply <- reply{err: err}
		}
		return
	}
	b.batches.Add(1)
	lateBefore, unwrittenBefore := b.conns.lateReads.Load(), b.conns.lateWrites.Load()
	ctx, cancel := context.WithTimeout(context.Background(), b.wire)
	defer cancel()
	groups := b.group(live, buf)
	keys, args := buf.lists(len(groups))
	script := b.script
	var own []*redis.Script // by group: its call's own script (nil: script)
	for i, g := range groups {
		switch s := g[0].Script; {
		case s == nil:
		case len(groups) == 1:
			script = s // one group of its own script: no list of scripts
		default:
			if own == nil {
				own = make([]*redis.Script, len(groups))
			}
			own[i] = s
		}
		if merged(g[0]) {
			keys[i], args[i] = buf.batchArgs(g)
		} else {
			keys[i], args[i] = g[0].Keys[:g[0].NKeys], g[0].Args[:g[0].NArgs]
		}
	}
	cmds := buf.commands(len(groups))
	// With Redis Cluster, a node's groups that were answered are handed
	// out as soon as that node's pipeline ends: a caller of an answering
	// master neither waits for a silent master's wire deadline nor, its
	// timer ending first, asks the judge meanwhile, which may have seen
	// the silent master's request written after the answer was read and
	// called Redis silent.
	var handed []bool
	var answered func(idx []int)
	if b.cluster && len(groups) > 1 {
		handed = buf.handedOut(len(groups))
		answered = func(idx []int) {
			for _, i := range idx {
				if cmds[i].Err() == nil {
					handed[i] = true
					b.hand(groups[i], cmds[i], nil)
				}
			}
		}
	}
	cmds, failed := runScripts(ctx, b.client, script, own, keys, args, cmds, answered)
	// A timeout while a reply sat unread in a socket was the node's doing:
	// excluded from the breaker, its callers shed. So was a request that
	// reached its socket past the deadline, unwritten. A failure on the
	// wire is the verdict of the callers waiting meanwhile (wireDown), told
	// only once this batch's replies are handed out: with Redis Cluster a
	// batch spans nodes, and the callers of a node that answered get their
	// replies, not the silence of another node its round trip waited on.
	down, failed := b.wireOutcome(failed, lateBefore, unwrittenBefore)
	if down {
		defer b.wireDown.Store(b.conns.now()) // the outcome's time, stored last
	}
	late := failed != nil && (errors.Is(failed, errReadLate) || errors.Is(failed, errWriteLate))
	// A batch that got no connection of the pool in time was never sent:
	// excluded from the breaker. While Redis owes an answer (see owed) the
	// pool is full of connections waiting on Redis, and the wait says
	// nothing of this gateway's load: the calls go back to their callers,
	// who queue them again and judge Redis by the rule (a silent Redis
	// fails them closed, an answer frees a connection). Otherwise the
	// connections are this gateway's own doing: its callers are shed.
	done(failed)
	if failed != nil && !notRedis(failed) {
		b.health.Failed(failed)
	}
	for i, g := range groups {
		if handed != nil && handed[i] {
			continue
		}
		err := cmds[i].Err()
		if late && err != nil {
			// This gateway read too late and lost Redis' reply with the
			// connection, or wrote too late and never asked. Its callers
			// fail, but as an overloaded node, never as a Redis outage.
			// (A group answered, another Cluster node's, keeps its reply.)
			err = fmt.Errorf("%w: %w", ErrBusy, failed)
		} else if err != nil && poolWait(err) {
			if b.owed() {
				for _, c := range g {
					c.reply <- reply{again: true}
				}
				continue
			}
			err = fmt.Errorf("%w: %w", ErrBusy, err)
		}
		b.hand(g, cmds[i], err)
	}
}

// hand gives group g its replies from cmd, its script call: each call its
// own values, or err (cmd's own error, as send judged it) to every call.
func (b *batcher) hand(g []*Call, cmd *redis.Cmd, err error) {
	var v []any
	var raw any
	if err == nil {
		if !merged(g[0]) {
			raw, err = cmd.Result()
			v, _ = raw.([]any)
		} else {
			v, err = cmd.Slice()
		}
	}
	off := 0
	for _, c := range g {
		r := reply{err: err}
		if !merged(c) { // alone in its group: the whole reply
			r.v, r.raw = v, raw
		} else if n := c.NValues; err == nil {
			if off+n > len(v) {
				r.err = errors.New("the script answered fewer values than its calls asked")
			} else {
				r.v = v[off : off+n : off+n]
				r.raw = r.v // Eval's answer: the call's own values
			}
			off += n
		}
		c.reply <- r
	}
}

// owed reports whether Redis owes the gateway an answer: a request
// written on a limiter connection and not answered since, or a round trip
// that failed on the wire with nothing read from Redis since.
func (b *batcher) owed() bool {
	if down := b.wireDown.Load(); down != 0 && b.conns.lastRead.Load() < down {
		return true
	}
	return b.conns.asked()
}

// group splits live into the script calls of one batch: all of it, or
// one group per script (the Conn's, and each merged one), and with Redis
// Cluster per hash slot too (each call's buckets share one); a call with a
// script of its own that is not merged is a group alone.
func (b *batcher) group(live []*Call, buf *sendBuf) [][]*Call {
	same := merged(live[0])
	for _, c := range live {
		same = same && merged(c) && c.Script == live[0].Script
	}
	if len(live) == 1 || !b.cluster && same {
		buf.one[0] = live
		return buf.one[:]
	}
	type key struct {
		script *redis.Script
		slot   uint16
	}
	var groups [][]*Call
	index := make(map[key]int)
	for _, c := range live {
		if !merged(c) {
			groups = append(groups, []*Call{c})
			continue
		}
		k := key{script: c.Script}
		if b.cluster {
			k.slot = Slot(c.Keys[0])
		}
		i, ok := index[k]
		if !ok {
			i = len(groups)
			index[k] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], c)
	}
	return groups
}

// merged reports whether c is merged with the calls of its script: the
// Conn's, or one of its own that takes the batch's form.
func merged(c *Call) bool { return c.Script == nil || c.Merge }

// sendBuf is one sender's room for a batch's lists (the groups' keys and
// arguments, the commands), kept from one batch to the next: a batch on
// one Redis allocates none of them. Whatever a batch's replies hand out is
// go-redis' (the commands' values), never these.
type sendBuf struct {
	one   [1][]*Call
	keys  [][]string
	args  [][]any
	mkeys []string // merged groups' keys and arguments, one after the other
	margs []any
	cmds  []*redis.Cmd
	// handed marks the groups whose replies went out as their Cluster
	// node answered, before the batch's other nodes did (see send).
	handed []bool
}

// lists are n groups' keys and arguments, to fill.
func (s *sendBuf) lists(n int) ([][]string, [][]any) {
	if cap(s.keys) < n {
		s.keys, s.args = make([][]string, n), make([][]any, n)
	}
	return s.keys[:n], s.args[:n]
}

// commands is room for n commands.
func (s *sendBuf) commands(n int) []*redis.Cmd {
	if cap(s.cmds) < n {
		s.cmds = make([]*redis.Cmd, n)
	}
	return s.cmds[:n]
}

// handedOut is n groups' marks, none set.
func (s *sendBuf) handedOut(n int) []bool {
	if cap(s.handed) < n {
		s.handed = make([]bool, n)
	}
	clear(s.handed[:n])
	return s.handed[:n]
}

// batchArgs is one merged group's KEYS and ARGV for the script (see Call).
func (s *sendBuf) batchArgs(g []*Call) ([]string, []any) {
	k, a := len(s.mkeys), len(s.margs)
	for _, c := range g {
		s.mkeys = append(s.mkeys, c.Keys[:c.NKeys]...)
		s.margs = append(s.margs, c.NKeys)
		s.margs = append(s.margs, c.Args[:c.NArgs]...)
	}
	return s.mkeys[k:len(s.mkeys):len(s.mkeys)], s.margs[a:len(s.margs):len(s.margs)]
}

// clear drops what the last batch left (its calls' keys and arguments, its
// commands), keeping the room.
func (s *sendBuf) clear() {
	s.one[0] = nil
	clear(s.keys)
	clear(s.args)
	clear(s.mkeys)
	clear(s.margs)
	clear(s.cmds)
	s.mkeys, s.margs = s.mkeys[:0], s.margs[:0]
}

// RunScripts runs script once per group of keys and args on client, as
// the transport's own calls run (runScripts): one command, or one
// pipeline a Redis Cluster node at once, then EVAL for the groups that met
// NOSCRIPT. It returns each group's command and the first error among
// them. For calls off the request path (concurrency slots' releases and
// refreshes, leased quotas' give-backs): no breaker, no batch.
func RunScripts(ctx context.Context, client redis.UniversalClient, script *redis.Script, keys [][]string, args [][]any) ([]*redis.Cmd, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	return runScripts(ctx, client, script, nil, keys, args, make([]*redis.Cmd, len(keys)), nil)
}

// runScripts runs a script once per group of keys and args (own[i] when
// own is not nil and it is set, else script): one command, or several
// pipelined in one round trip (Redis Cluster, one per slot; calls with
// scripts of their own), then EVAL for any that met NOSCRIPT (a Redis that
// lost its scripts). It sets the commands in cmds (of len(keys)) and
// returns them and the first error among them. answered, when set, is
// called from each Cluster node's pipeline as it ends, with the indexes
// of that node's groups (their commands set; before any EVAL again).
func runScripts(ctx context.Context, client redis.UniversalClient, script *redis.Script, own []*redis.Script, keys [][]string, args [][]any, cmds []*redis.Cmd, answered func(idx []int)) ([]*redis.Cmd, error) {
	var nodes map[*redis.Client][]int
	if len(keys) > 1 {
		nodes = byNode(ctx, client, keys)
	}
	switch {
	case len(keys) == 1:
		cmds[0] = scriptFor(script, own, 0).EvalSha(ctx, client, keys[0], args[0]...)
	case len(nodes) > 1:
		// A Cluster pipeline whose part on one node fails is tried again
		// (MaxRedirects) after a backoff; with the deadline past by then,
		// go-redis sets that error on every command of the pipeline, the
		// other nodes' answers too. One pipeline a node, at once: each
		// command keeps its own node's outcome.
		var wg sync.WaitGroup
		for _, idx := range nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				pipeline(ctx, client, script, own, keys, args, idx, cmds)
				if answered != nil {
					answered(idx)
				}
			}()
		}
		wg.Wait()
	default:
		pipeline(ctx, client, script, own, keys, args, nil, cmds)
	}
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			cmds[i] = scriptFor(script, own, i).Eval(ctx, client, keys[i], args[i]...)
		}
	}
	var failed error
	for _, cmd := range cmds {
		if err := cmd.Err(); err != nil && failed == nil {
			failed = err
		}
	}
	return cmds, failed
}

// scriptFor is group i's script: own[i] when own is not nil and it is
// set, else script.
func scriptFor(script *redis.Script, own []*redis.Script, i int) *redis.Script {
	if own != nil && own[i] != nil {
		return own[i]
	}
	return script
}

// pipeline runs the groups idx (all of them when nil) in one pipeline of
// client, setting their commands in cmds.
func pipeline(ctx context.Context, client redis.UniversalClient, script *redis.Script, own []*redis.Script, keys [][]string, args [][]any, idx []int, cmds []*redis.Cmd) {
	pipe := client.Pipeline()
	if idx == nil {
		for i := range keys {
			cmds[i] = scriptFor(script, own, i).EvalSha(ctx, pipe, keys[i], args[i]...)
		}
	} else {
		for _, i := range idx {
			cmds[i] = scriptFor(script, own, i).EvalSha(ctx, pipe, keys[i], args[i]...)
		}
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
}

// byNode is, for a Redis Cluster, the groups' indexes by the master each
// group's first key maps to; nil for a single Redis, or when the map is
// not known yet (the client's pipeline then finds the nodes itself).
func byNode(ctx context.Context, client redis.UniversalClient, keys [][]string) map[*redis.Client][]int {
	cl, ok := client.(*redis.ClusterClient)
	if !ok {
		return nil
	}
	nodes := make(map[*redis.Client][]int, 2)
	for i, k := range keys {
		if len(k) == 0 {
			return nil // a script without keys: any node
		}
		n, err := cl.MasterForKey(ctx, k[0])
		if err != nil {
			return nil
		}
		nodes[n] = append(nodes[n], i)
	}
	return nodes
}
