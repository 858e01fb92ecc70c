package redisconn

import "time"

// The seams below are for tests outside this package that hold the
// transport still while they watch what a caller of it does: the
// limiter's batches over a real Redis (gateway/limit: a batch held in
// flight while calls queue behind it, a node made late under its leases)
// and the gateway's limits over a late node (gateway's root tests). The
// transport's own tests reach its fields directly. Set them before the
// calls they concern.

// SetBeforeSend (tests only) runs f in the sender before it sends a
// batch: a sender that got its core late.
func (c *Conn) SetBeforeSend(f func()) { c.batch.beforeSend = f }

// SetWakeDelay (tests only) makes the lateness probe sleep d after each
// wake: a node that gets its core that late.
func (c *Conn) SetWakeDelay(d time.Duration) { c.batch.late.wakeDelay.Store(int64(d)) }

// Batches (tests only) is how many pipelines were sent.
func (c *Conn) Batches() uint64 { return c.batch.batches.Load() }

// Queued (tests only) is how many calls wait for a sender.
func (c *Conn) Queued() int { return len(c.batch.queue) }
