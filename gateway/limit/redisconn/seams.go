package redisconn

import "time"

// The seams below are for tests of the limiter over a real Redis (in
// gateway/limit): they stand for a node that runs late, and count what
// went over the wire. Set them before the calls they concern.

// SetBeforeSend (tests only) runs f in the sender before it sends a
// batch: a sender that got its core late.
func (c *Conn) SetBeforeSend(f func()) { c.batch.beforeSend = f }

// SetBeforeRead (tests only) runs f before each read of a watched
// connection: a reader that got its core late.
func (c *Conn) SetBeforeRead(f func()) { c.batch.conns.beforeRead = f }

// SetBeforeWrite (tests only) runs f before each write of a watched
// connection: a writer that got its core late.
func (c *Conn) SetBeforeWrite(f func()) { c.batch.conns.beforeWrite = f }

// SetWakeDelay (tests only) makes the lateness probe sleep d after each
// wake: a node that gets its core that late.
func (c *Conn) SetWakeDelay(d time.Duration) { c.batch.late.wakeDelay.Store(int64(d)) }

// Lost (tests only) is how much time the on-time clock has not counted:
// the node's ticks past their slack.
func (c *Conn) Lost() time.Duration { return c.batch.late.Lost() }

// SetTimeouts (tests only) changes a pipelined caller's wait, the wire
// deadline and the busy bound.
func (c *Conn) SetTimeouts(timeout, wire, busy time.Duration) {
	c.timeout = timeout
	if c.batch != nil {
		c.batch.timeout, c.batch.wire, c.batch.busy = timeout, wire, busy
	}
}

// RestartPipeline (tests only) replaces the batcher with one of the given
// bounds (the other settings kept), so that, with one sender, the calls
// arriving while its pipeline is in flight form exactly one batch.
func (c *Conn) RestartPipeline(timeout time.Duration, max, senders int) {
	slack := c.batch.late.slack
	c.batch.close()
	c.batch = newBatcher(c.client, &Options{Script: c.script, Timeout: timeout, WireTimeout: timeout, BusyTimeout: timeout,
		PipelineMax: max, PipelineSenders: senders, TickSlack: slack}, c.health, c.clock)
}

// Batches (tests only) is how many pipelines were sent.
func (c *Conn) Batches() uint64 { return c.batch.batches.Load() }

// Scripts (tests only) is how many script calls the pipelines held.
func (c *Conn) Scripts() uint64 { return c.batch.scripts.Load() }

// Queued (tests only) is how many calls wait for a sender.
func (c *Conn) Queued() int { return len(c.batch.queue) }
