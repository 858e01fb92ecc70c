package limit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// errClosed answers calls made after Close.
var errClosed = errors.New("limiter closed")

// batcher is auto-pipelining for the limit script: concurrent callers
// enqueue their call, one goroutine takes whatever is queued (up to max)
// and sends it as ONE pipeline of EVALSHA calls, one write and one read for
// the lot, then hands each caller its own reply. A lone caller is one round
// trip as without it. Under load this trades one syscall pair and one
// connection per request for one per batch, which is most of what a limiter
// call costs on both ends.
//
// Fail-closed semantics are the caller's as before: each caller waits at
// most its own timeout and then gives up with an error (503), whatever the
// batch answers later; a caller whose deadline passed while it was queued
// is not sent at all. Nothing is retried (the client has MaxRetries -1).
//
// A few senders work the queue, so that a few callers at a time (light
// load) each go at once as before rather than waiting for one another.
type batcher struct {
	client  redis.UniversalClient
	timeout time.Duration
	max     int
	queue   chan *call
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
	calls   sync.Pool
	// cluster groups a batch by hash slot: one script's keys share a slot.
	cluster bool
	// batches counts pipelines sent, scripts the script calls in them,
	// for tests.
	batches atomic.Uint64
	scripts atomic.Uint64
}

// call is one caller's script call and the channel its reply arrives on.
// A call is reused (calls pool) only by a caller that got its reply; one
// that gave up leaves it to the garbage collector, since the batch may still
// write to it.
type call struct {
	keys     [MaxChecks]string
	args     [3 * MaxChecks]any
	n        int
	deadline time.Time
	reply    chan reply // capacity 1: the batch never blocks on a caller
	timer    *time.Timer
}

type reply struct {
	v   []any
	err error
	at  time.Time // when the batch had the answer
}

func newBatcher(client redis.UniversalClient, timeout time.Duration, max, senders int) *batcher {
	_, cluster := client.(*redis.ClusterClient)
	b := &batcher{client: client, timeout: timeout, max: max, cluster: cluster,
		queue: make(chan *call, 4*max), stop: make(chan struct{}), done: make(chan struct{})}
	b.calls.New = func() any {
		t := time.NewTimer(time.Hour)
		t.Stop()
		return &call{reply: make(chan reply, 1), timer: t}
	}
	var wg sync.WaitGroup
	for i := 0; i < senders; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.run()
		}()
	}
	go func() {
		wg.Wait()
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

// do runs the limit script for cs through the next batch and returns its
// raw reply. It returns within the timeout whatever Redis does.
func (b *batcher) do(cs *Checks) ([]any, error) {
	select {
	case <-b.stop:
		return nil, errClosed
	default: // a call racing close waits out its timeout at worst
	}
	c := b.calls.Get().(*call)
	c.n = cs.Count
	for i := 0; i < cs.Count; i++ {
		ch := cs.List[i]
		c.keys[i] = keyPrefix + ch.Key
		shadow := "0"
		if ch.Rate.Shadow {
			shadow = "1"
		}
		emission := ch.Rate.Period.Seconds() / float64(ch.Rate.Limit)
		c.args[3*i], c.args[3*i+1], c.args[3*i+2] = emission, emission*float64(ch.Rate.burst()), shadow
	}
	c.deadline = time.Now().Add(b.timeout)
	c.timer.Reset(b.timeout)
	select {
	case b.queue <- c:
	case <-c.timer.C:
		b.calls.Put(c) // never queued: nobody else holds it
		return nil, context.DeadlineExceeded
	case <-b.stop:
		c.timer.Stop()
		return nil, errClosed
	}
	// c goes back to the pool only after its last read: another caller may
	// take it at once.
	select {
	case r := <-c.reply:
		c.timer.Stop()
		late := r.at.After(c.deadline)
		b.calls.Put(c)
		if late {
			return nil, context.DeadlineExceeded // the timer ran late; the deadline did not
		}
		return r.v, r.err
	case <-c.timer.C:
		select {
		case r := <-c.reply:
			late := r.at.After(c.deadline)
			b.calls.Put(c)
			if late {
				return nil, context.DeadlineExceeded // answered too late: fail closed
			}
			return r.v, r.err // answered in time; this goroutine only ran late
		default:
			return nil, context.DeadlineExceeded // c is abandoned to the batch
		}
	}
}

// run is one sender: it takes the first queued call, whatever else is
// queued by then, and sends them. With every sender busy the queue grows,
// and the next free sender takes it whole: batches grow with the load.
func (b *batcher) run() {
	batch := make([]*call, 0, b.max)
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
		b.send(batch)
		clear(batch) // drop references to calls handed back
	}
}

// drain fails what is still queued at close.
func (b *batcher) drain() {
	for {
		select {
		case c := <-b.queue:
			c.reply <- reply{err: errClosed}
		default:
			return
		}
	}
}

// send makes one round trip for the callers of batch still waiting: ONE
// script call for the whole batch (with Redis Cluster, one per hash slot,
// pipelined), and a second round trip only for NOSCRIPT (a Redis that lost
// its scripts: EVAL loads it again).
func (b *batcher) send(batch []*call) {
	now := time.Now()
	live := batch[:0]
	var deadline time.Time
	for _, c := range batch {
		if !c.deadline.After(now) {
			c.reply <- reply{err: context.DeadlineExceeded} // its caller has given up: not charged
			continue
		}
		live = append(live, c)
		if c.deadline.After(deadline) {
			deadline = c.deadline
		}
	}
	if len(live) == 0 {
		return
	}
	b.batches.Add(1)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	groups := b.group(live)
	keys := make([][]string, len(groups))
	args := make([][]any, len(groups))
	for i, g := range groups {
		keys[i], args[i] = batchArgs(g)
	}
	cmds := make([]*redis.Cmd, len(groups))
	b.scripts.Add(uint64(len(groups)))
	if len(groups) == 1 {
		cmds[0] = allowBatch.EvalSha(ctx, b.client, keys[0], args[0]...)
	} else {
		pipe := b.client.Pipeline()
		for i := range groups {
			cmds[i] = allowBatch.EvalSha(ctx, pipe, keys[i], args[i]...)
		}
		_, _ = pipe.Exec(ctx) // each command carries its own error
	}
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			cmds[i] = allowBatch.Eval(ctx, b.client, keys[i], args[i]...)
		}
	}
	at := time.Now()
	for i, g := range groups {
		v, err := cmds[i].Slice()
		off := 0
		for _, c := range g {
			r := reply{err: err, at: at}
			if n := 4 * c.n; err == nil {
				if off+n > len(v) {
					r.err = errors.New("limit script answered fewer values than its calls asked")
				} else {
					r.v = v[off : off+n : off+n]
				}
				off += n
			}
			c.reply <- r
		}
	}
}

// group splits live into the script calls of one batch: all of it, or with
// Redis Cluster one group per hash slot (each call's buckets share one).
func (b *batcher) group(live []*call) [][]*call {
	if !b.cluster {
		return [][]*call{live}
	}
	var groups [][]*call
	index := make(map[uint16]int)
	for _, c := range live {
		s := slot(c.keys[0])
		i, ok := index[s]
		if !ok {
			i = len(groups)
			index[s] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], c)
	}
	return groups
}

// batchArgs is one group's KEYS and ARGV for allowBatchSource.
func batchArgs(g []*call) ([]string, []any) {
	nk := 0
	for _, c := range g {
		nk += c.n
	}
	keys := make([]string, 0, nk)
	args := make([]any, 0, len(g)+3*nk)
	for _, c := range g {
		keys = append(keys, c.keys[:c.n]...)
		args = append(args, c.n)
		args = append(args, c.args[:3*c.n]...)
	}
	return keys, args
}
