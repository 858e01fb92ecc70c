package limit

import (
	"hash/maphash"
	"slices"
	"sync"
	"time"

	"vendorgate/gateway/policy"
)

// localShards spreads buckets over locks so that vendors do not contend.
const localShards = 64

// Local is an in-process GCRA limiter with redis_rate's semantics, for a
// single gateway instance (no Redis configured). It never fails.
type Local struct {
	now    func() time.Time
	seed   maphash.Seed
	shards [localShards]localShard
	// refunds caps Refund; nil in a cap's own bucket store.
	refunds *refundCap
}

type localShard struct {
	mu     sync.Mutex
	tat    map[string]int64 // bucket → theoretical arrival time (unix ns)
	writes int
	// seq orders the shard's charges of policies that refund and its
	// refunds; refunds logs what each bucket's refunds took off (see
	// Local.Refund), while the bucket is held.
	seq     uint64
	refunds map[string][]localRefund
}

// localRefund is one refund Local applied: its place in the shard's order,
// its charge's, and what it took off (ns).
type localRefund struct {
	seq, charge uint64
	back        int64
}

// LocalOptions configures a Local limiter.
type LocalOptions struct {
	// Now is the clock; time.Now when nil. Tests move it forward instead of
	// sleeping.
	Now func() time.Time
}

// NewLocal returns an in-process limiter.
func NewLocal(o LocalOptions) *Local {
	if o.Now == nil {
		o.Now = time.Now
	}
	l := newLocal(o.Now)
	l.refunds = newRefundCap(o.Now)
	return l
}

func newLocal(now func() time.Time) *Local {
	l := &Local{now: now, seed: maphash.MakeSeed()}
	for i := range l.shards {
		l.shards[i].tat = make(map[string]int64)
	}
	return l
}

// Allow is Decide for a caller that keeps its checks and decision by
// value.
func (l *Local) Allow(cs policy.Checks) (d Decision, err error) {
	err = l.Decide(&cs, &d)
	return d, err
}

// Decide checks every limit of cs into d and charges them only when every
// enforced limit allows (a shadow limit that refuses is not charged). It
// never fails.
func (l *Local) Decide(cs *policy.Checks, d *Decision) error {
	d.reset(cs.Count)
	now := l.now().UnixNano()
	var idx [policy.MaxChecks]int
	for i := 0; i < cs.Count; i++ {
		idx[i] = int(maphash.String(l.seed, cs.List[i].Key) % localShards)
	}
	order, locked := l.lock(&idx, cs.Count)
	var tats [policy.MaxChecks]int64
	for i := 0; i < cs.Count; i++ {
		d.Results[i], tats[i] = gcra(now, l.shards[idx[i]].tat[cs.List[i].Key], cs.List[i].Rate)
	}
	d.decide(cs)
	if d.Allowed {
		for i := 0; i < cs.Count; i++ {
			if d.Results[i].Allowed {
				sh := &l.shards[idx[i]]
				sh.tat[cs.List[i].Key] = tats[i]
				if cs.List[i].Rate.Refund {
					sh.seq++
					d.receipts[i] = receipt{kind: receiptGrant, tat: tats[i], epoch: sh.seq}
				}
				sh.writes++
				if sh.writes&1023 == 0 {
					sh.sweep(now)
				}
			}
		}
	}
	l.unlock(&order, locked)
	return nil
}

// lock takes the shards of the checks in ascending order, each once (a
// request's buckets may share a shard), so that two requests never hold
// one another's; unlock releases them. Up to MaxChecks shards: a sort of
// a handful on the stack.
func (l *Local) lock(idx *[policy.MaxChecks]int, n int) (order [policy.MaxChecks]int, m int) {
	for i := 0; i < n; i++ {
		order[m] = idx[i]
		m++
	}
	slices.Sort(order[:m])
	m = len(slices.Compact(order[:m]))
	for i := 0; i < m; i++ {
		l.shards[order[i]].mu.Lock()
	}
	return order, m
}

func (l *Local) unlock(order *[policy.MaxChecks]int, m int) {
	for i := 0; i < m; i++ {
		l.shards[order[i]].mu.Unlock()
	}
}

// sweep drops buckets whose tat has passed: they are whole again, exactly
// as if absent, so memory stays bounded by the active vendors.
func (s *localShard) sweep(now int64) {
	for k, tat := range s.tat {
		if tat <= now {
			delete(s.tat, k)
			delete(s.refunds, k) // no charge they lowered has anything left
		}
	}
}

// Len is the number of buckets held, for tests.
func (l *Local) Len() int {
	n := 0
	for i := range l.shards {
		l.shards[i].mu.Lock()
		n += len(l.shards[i].tat)
		l.shards[i].mu.Unlock()
	}
	return n
}
