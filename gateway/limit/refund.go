package limit

import (
	"hash/maphash"
	"math"
	"math/bits"
	"time"

	"vendorgate/gateway/policy"
)

// Refunds for the gateway's failures. A policy that refunds (Rate.Refund)
// gives a request's tokens back when the gateway failed it for the backend
// (the gateway says when: the backend answered 5xx, or the gateway answered
// 504 for it). A refund lowers only the request's own charge, through the
// mechanism leases use: a token taken from a lease, or charged with one,
// goes back to that lease (see leases.putBack), which one refund of the
// grant then reckons once; a token charged alone is a grant of one, sent
// back by the refund script against its own TAT (only what of it is still
// in the future, only while the stored TAT is not below it). A token whose
// lease, or a later lease of its bucket, was sent back or dropped
// meanwhile stays charged: a second refund of one grant could erase
// another gateway's later charge.
//
// Refunds are capped per bucket at each gateway: at most RefundShare of
// the bucket's burst a minute (at least one request's cost), so that a
// retry storm against a failing backend lifts the limit by that much at
// most. Past the cap the tokens stay charged.

// RefundShare is the share of a bucket's burst that refunds may give back
// a minute at each gateway.
const RefundShare = 0.1

// receipt is how one check's token was charged, for Refund.
type receipt struct {
	kind         uint8
	older, after bool
	gen          uint32
	epoch        uint64
	// tat is the grant's TAT after the charge: µs since 2017 in Redis, ns
	// in process.
	tat     int64
	expires int64 // a lease token's: its lease's expiry
}

// The kinds of receipts.
const (
	receiptNone  = iota
	receiptLease // a lease's token (taken from it, or the request's own of its grant)
	receiptGrant // a grant of the request's own token alone, up to tat
)

func leaseReceipt(t ticket) receipt {
	return receipt{kind: receiptLease, gen: t.gen, epoch: t.epoch, tat: t.tatUS, expires: t.expires, older: t.older, after: t.after}
}

func (rc receipt) ticket() ticket {
	return ticket{gen: rc.gen, epoch: rc.epoch, tatUS: rc.tat, expires: rc.expires, older: rc.older, after: rc.after}
}

// refundCap is the per-bucket cap on refunds at one gateway: a GCRA bucket
// in process per bucket refunded.
type refundCap struct{ l *Local }

func newRefundCap(now func() time.Time) *refundCap { return &refundCap{l: newLocal(now)} }

// capTokens is the most tokens refunds give back of a bucket of r a
// minute: RefundShare of its burst, at least one request's cost.
func capTokens(r policy.Rate) int {
	return max(int(math.Ceil(RefundShare*float64(r.EffectiveBurst()))), r.Tokens())
}

// take reports whether c's request may have its tokens back.
func (rc *refundCap) take(c *policy.Check) bool {
	n := capTokens(c.Rate)
	var cs policy.Checks
	cs.Add(policy.Check{Key: c.Key, Rate: policy.Rate{Name: c.Rate.Name, Limit: n, Period: time.Minute, Cost: int32(c.Rate.Tokens())}})
	d, _ := rc.l.Allow(cs)
	return d.Allowed
}

// Refund gives back the tokens d charged for cs's checks of policies that
// refund, within the cap; it reports how many buckets have them back (or
// on their way). Call it once per admitted request, after the gateway
// failed it for the backend.
func (r *Redis) Refund(cs policy.Checks, d Decision) int { return bits.OnesCount16(r.refund(&cs, &d)) }

var _ [16 - policy.MaxChecks]struct{} // refund's uint16 has a bit per check

// refund is Refund, reporting which checks' tokens went back (bit i:
// check i; the bits hold every check of a request).
func (r *Redis) refund(cs *policy.Checks, d *Decision) (back uint16) {
	if !d.Allowed {
		return 0
	}
	now := r.clock.Nanotime()
	for i := 0; i < cs.Count; i++ {
		c := &cs.List[i]
		rc := d.receipts[i]
		if !c.Rate.Refund || rc.kind == receiptNone || !r.refunds.take(c) {
			continue
		}
		switch rc.kind {
		case receiptLease:
			if r.leases.putBack(c.Key, rc.ticket(), now) {
				back |= 1 << i
			}
		case receiptGrant:
			f := refund{key: keyPrefix + c.Key, emission: float64(interval(c.Rate)) / float64(time.Second), unused: 1, tatGrantUS: rc.tat}
			back |= 1 << i
			if r.leases != nil { // sent with the leases' next refunds
				r.leases.mu.Lock()
				r.leases.refunds = append(r.leases.refunds, f)
				r.leases.mu.Unlock()
				continue
			}
			go r.sendRefunds([]refund{f}) // no lease loop (no pipeline): one script call of its own
		}
	}
	return back
}

// Refund gives back the tokens d charged for cs's checks of policies that
// refund, within the cap; see Redis.Refund. A bucket charged again since
// the request keeps that later charge: only what of the request's own
// token is still in the future goes back, and only while the bucket's TAT
// is not below its charge's.
func (l *Local) Refund(cs policy.Checks, d Decision) int {
	if !d.Allowed {
		return 0
	}
	n := 0
	now := l.now().UnixNano()
	for i := 0; i < cs.Count; i++ {
		c := &cs.List[i]
		rc := d.receipts[i]
		if !c.Rate.Refund || rc.kind != receiptGrant || !l.refunds.take(c) {
			continue
		}
		sh := &l.shards[maphash.String(l.seed, c.Key)%localShards]
		sh.mu.Lock()
		if tat, ok := sh.tat[c.Key]; ok && tat >= rc.tat {
			if back := min(interval(c.Rate), rc.tat-now); back > 0 {
				if tat-back <= now {
					delete(sh.tat, c.Key)
				} else {
					sh.tat[c.Key] = tat - back
				}
				n++
			}
		}
		sh.mu.Unlock()
	}
	return n
}
