package limit

import (
	"hash/maphash"
	"math"
	"math/bits"
	"slices"
	"sync"
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
// in the future, only while the stored TAT is not below it), that TAT
// lowered by what this gateway's own refunds of earlier grants of the
// bucket took off under it since (see ownRefunds: two failed requests in a
// row, the first one's refund sent while the second's charge was open). A
// token whose lease, or a later lease of its bucket, was sent back or
// dropped meanwhile stays charged: a second refund of one grant could
// erase another gateway's later charge.
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
	// epoch is a lease token's leases.epoch; a grant's (receiptGrant),
	// in Redis, Redis.refundSeq when its answer came (see ownRefunds), in
	// process its place in its shard's order (see Local.Refund).
	epoch uint64
	// tat is the grant's TAT after the charge: µs since 2017 in Redis, ns
	// in process.
	tat int64
	// expires is a lease token's lease's expiry; a grant's (receiptGrant,
	// in Redis), the TIME of the run that charged it, µs since 2017 (0:
	// not known).
	expires int64
}

// grantReceipt is the receipt of a request's own token charged alone in
// Redis by g, answered when Redis.refundSeq was seq. (A grant's receipt
// keeps these two in fields only a lease token's uses: a Decision holds a
// receipt per check, and copies them all.)
func grantReceipt(g grant, seq uint64) receipt {
	return receipt{kind: receiptGrant, tat: g.tatUS, epoch: seq, expires: g.atUS}
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
			f := refund{key: keyPrefix + c.Key, emission: float64(interval(c.Rate)) / float64(time.Second), unused: 1, tatGrantUS: rc.tat,
				seq: rc.epoch, atUS: rc.expires}
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
// is not below its charge's, less what refunds of charges made before it
// took off since (as Redis' refunds are reckoned, see ownRefunds; in
// process every refund is known, in the shard's order).
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
		g := rc.tat
		for _, e := range sh.refunds[c.Key] {
			if e.seq > rc.epoch && e.charge < rc.epoch { // after this charge, of one before it
				g -= e.back
			}
		}
		if tat, ok := sh.tat[c.Key]; ok && tat >= g {
			if back := min(interval(c.Rate), g-now); back > 0 {
				if tat-back <= now {
					delete(sh.tat, c.Key)
					delete(sh.refunds, c.Key)
				} else {
					sh.tat[c.Key] = tat - back
					sh.seq++
					if sh.refunds == nil {
						sh.refunds = make(map[string][]localRefund)
					}
					log := sh.refunds[c.Key]
					if len(log) == ownRefundsKept {
						log = append(log[:0], log[1:]...)
					}
					sh.refunds[c.Key] = append(log, localRefund{seq: sh.seq, charge: rc.epoch, back: back})
				}
				n++
			}
		}
		sh.mu.Unlock()
	}
	return n
}

// ownRefunds is what this gateway's refunds took off each bucket lately,
// for the refunds it sends after them (gcraSource's s).
//
// A refund applies only while the bucket's TAT is not below its grant's
// TAT g (the fence): below it, the bucket was lost and rebuilt since, or
// another refund lowered it. One refund lowering it is the gateway's own,
// and known exactly: a refund of an earlier grant of the bucket, sent
// while a later charge of it by this gateway was still open (its request
// not yet failed, its lease not yet expired). That earlier refund took
// back tokens charged under the later charge, and so lowered the TAT at
// which the later charge now ends by what it took off: the later charge's
// refund, fenced at its own g, was skipped, and those tokens stayed
// charged until the bucket refilled (TestRefundAcrossGateways: 91 or 92
// tokens left of 95). So each refund run answers what each refund took
// off, and a refund is reckoned at g less what this gateway's refunds of
// the same bucket took off since its charge: refunds of grants whose run
// came before its own (Redis' TIME, from their answers: charged under it)
// with a lower TAT, sent after its answer came (their run's sequence
// number, refundSeq, above the one its answer saw: they ran after it in
// Redis). What other gateways' refunds took off, and a refund whose answer
// was lost, are not known: the fence keeps those charges, as before.
//
// Why this never erases another gateway's later charge: a later charge
// by another gateway lies above this one's, at its own g less what was
// taken off under it (this gateway's refunds counted here, and others'),
// so the stored TAT is at least g - s while it is in the bucket, and the
// refund takes off at most what of its own charge lies ahead of now
// there, g - s - now: the later charge moves down by what lay under it,
// as if that had never been charged, and is itself kept. A refund whose
// charge was lost (the bucket expired, flushed, restarted) finds the
// stored TAT below g - s, or, when a rebuilt bucket reached past it, the
// same bound as before (see "What a fault can cost").
type ownRefunds struct {
	mu     sync.Mutex
	m      map[string][]ownRefund // by Redis key, the latest last
	pruned int64                  // clock ns
}

// ownRefund is one refund this gateway's run applied.
type ownRefund struct {
	seq     uint64 // refundSeq of its run
	atUS    int64  // the TIME of the run that charged its grant, µs
	grantUS int64  // its grant's TAT, µs
	backUS  int64  // what it took off, µs (rounded up)
	// until (clock ns) is when the bucket's TAT, as the refund left it,
	// is behind Redis' now: every charge it lowered lay at or below that
	// TAT, and has nothing left to give back after it.
	until int64
}

// ownRefundsKept bounds a bucket's log: past it the earliest go. (A
// refund reckoned without some of the refunds that lowered its charge is
// reckoned higher than it lies, as every refund was before this log: its
// fence keeps more, its cap reaches further.)
const ownRefundsKept = 64

// adjust is what f's bucket's TAT was lowered by under f's charge by this
// gateway's refunds known so far (µs): 0 when f's charge's run is not
// known.
func (o *ownRefunds) adjust(f *refund) int64 {
	if f.atUS <= 0 {
		return 0
	}
	var s int64
	o.mu.Lock()
	for _, e := range o.m[f.key] {
		// Sent after f's answer came, of a grant charged before f's (TIMEs
		// read within a microsecond: 2 apart at least) and below it.
		if e.seq > f.seq && e.atUS+2 < f.atUS && e.grantUS < f.tatGrantUS {
			s += e.backUS
		}
	}
	o.mu.Unlock()
	return s
}

// record logs f's refund, sent in run seq, answered with backUS taken off
// and the bucket's TAT leftUS ahead of Redis' now after it, at now (clock
// ns). A refund that took nothing, of a grant whose run is not known, or
// that reaches past its grant's TAT (tokens of a later grant folded in,
// which may lie above a later charge) lowers no later charge by a known
// amount: not logged.
func (o *ownRefunds) record(f *refund, seq uint64, backUS, leftUS int64, now int64) {
	if backUS <= 0 || f.atUS <= 0 || f.after > 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = make(map[string][]ownRefund)
	}
	log := o.m[f.key]
	if len(log) == ownRefundsKept {
		log = append(log[:0], log[1:]...)
	}
	o.m[f.key] = append(log, ownRefund{seq: seq, atUS: f.atUS, grantUS: f.tatGrantUS, backUS: backUS, until: now + leftUS*int64(time.Microsecond)})
}

// prune forgets, at most once a second, the buckets whose refunds' until
// all passed: no charge they lowered has anything left to give back. (A
// bucket's log goes whole: a refund reckoned with some of them only would
// be reckoned higher than it lies.)
func (o *ownRefunds) prune(now int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if now-o.pruned < int64(time.Second) {
		return
	}
	o.pruned = now
	for k, log := range o.m {
		if !slices.ContainsFunc(log, func(e ownRefund) bool { return e.until > now }) {
			delete(o.m, k)
		}
	}
}
