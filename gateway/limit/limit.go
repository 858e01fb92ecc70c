// Package limit decides whether a request fits its rate limits. Both
// limiters apply redis_rate's GCRA: *Redis keeps the state in Redis so that
// every gateway replica shares one budget per vendor, *Local keeps it in
// process for a single gateway. A refusal is a Decision, not an error;
// errors are for failures (ErrUnavailable), which the gateway answers with
// 503: it never fails open.
//
// Where a request is admitted or refused: allow.go (Redis.Allow). It
// answers from the in-process memory of denials, from this gateway's
// leases (lease.go: tokens the script charged ahead, spent without asking
// Redis while Redis answers, the unused sent back as refunds), or by one
// call of the script (lua.go: GCRA with Redis' TIME as the clock, charging
// and leasing, and refunding), and assembles the Decision. redis.go builds
// the limiter and runs the lease loop (heartbeat, refunds, reload, Close).
// docs/limiter-design.md is the whole account: the algorithm, the invariants, why
// the lease bound holds, and each failure mode with what a vendor sees.
//
// How a call reaches Redis, and when Redis counts as down, is the
// transport's (gateway/limit/redisconn): keys and arguments in, raw replies
// out, pipelined, judged at the sockets, behind a breaker. It answers a
// caller whose Redis stayed silent past Timeout with a failure (here
// ErrUnavailable), and one whose node was too late to get Redis' answer
// in time with ErrBusy (shed, never taken for an outage).
package limit

import (
	"errors"
	"time"

	"vendorgate/gateway/policy"
)

// ErrUnavailable means the limiter could not decide: Redis refused, timed
// out or its breaker is open. The caller must refuse the request.
var ErrUnavailable = errors.New("rate limiter unavailable")

// Result is the state of one bucket after a check.
type Result struct {
	// Known is false when the limiter did not consult this bucket (a denial
	// remembered in process answered first).
	Known   bool
	Allowed bool
	// Remaining is how many more requests fit right now.
	Remaining int
	// RetryAfter is when the next request fits; 0 when allowed.
	RetryAfter time.Duration
	// ResetAfter is when the bucket is whole again.
	ResetAfter time.Duration
}

// Decision is the answer for one request. Allowed considers only enforced
// limits; a shadow limit that would have refused shows in Results and in
// ShadowDenied.
type Decision struct {
	Allowed      bool
	RetryAfter   time.Duration
	ShadowDenied bool
	// Count is how many Results there are: one per check, in their order.
	Count   int
	Results [policy.MaxChecks]Result
	// receipts say how each check's token was charged, for Refund; set
	// only for the checks of a policy that refunds (Rate.Refund).
	receipts [policy.MaxChecks]receipt
}

// Left is what check i's bucket holds after the decision, as the RateLimit
// header says it: what remains and how long until it is whole. 0 when the
// bucket refused. When another limit refused the request, one more than
// Remaining and one emission interval less: a decision is all-or-nothing,
// so this bucket's token was not taken (or was given back to its lease),
// where Remaining and ResetAfter are figured as if it had been.
//
// With a cost above one, remaining is in the policy's units, tokens: what
// the bucket holds, whole tokens (Remaining counts requests of the cost).
func (d *Decision) Left(i int, r policy.Rate) (remaining int, reset time.Duration) {
	res := d.Results[i]
	remaining, reset = res.Remaining, res.ResetAfter
	switch {
	case !res.Allowed:
		return 0, res.ResetAfter
	case !d.Allowed:
		remaining, reset = min(res.Remaining+1, capacity(r)), max(res.ResetAfter-time.Duration(interval(r)), 0)
	}
	if r.Tokens() > 1 {
		// The bucket holds what its burst leaves past the reset.
		token := int64(r.Period) / int64(r.Limit)
		remaining = int(min(max((token*int64(r.EffectiveBurst())-int64(reset))/token, 0), int64(r.EffectiveBurst())))
	}
	return remaining, reset
}

// interval is what one request of r moves its bucket's TAT (ns): the
// emission interval times the cost.
func interval(r policy.Rate) int64 {
	return int64(r.Period) / int64(r.Limit) * int64(r.Tokens())
}

// capacity is how many requests of r a whole bucket admits at once.
func capacity(r policy.Rate) int { return max(r.EffectiveBurst()/r.Tokens(), 1) }

// decide fills Allowed, RetryAfter and ShadowDenied from Results.
// reset readies d for a decision of n checks: what deciding sets or
// accumulates, cleared (the Results and receipts of n checks).
func (d *Decision) reset(n int) {
	d.Allowed, d.RetryAfter, d.ShadowDenied, d.Count = false, 0, false, 0
	clear(d.Results[:n])
	clear(d.receipts[:n])
}

func (d *Decision) decide(cs *policy.Checks) {
	d.Count = cs.Count
	d.Allowed = true
	for i := 0; i < cs.Count; i++ {
		r := d.Results[i]
		if !r.Known || r.Allowed {
			continue
		}
		if cs.List[i].Rate.Shadow {
			d.ShadowDenied = true
			continue
		}
		d.Allowed = false
		if r.RetryAfter > d.RetryAfter {
			d.RetryAfter = r.RetryAfter
		}
	}
}

// gcra is redis_rate's GCRA step in nanoseconds: given the stored
// theoretical arrival time tat (0 when none) it returns the result and the
// new tat to store when allowed.
// A request costs r.Tokens() tokens: it moves the TAT by that many
// emission intervals, and Remaining counts requests of that cost.
func gcra(now, tat int64, r policy.Rate) (Result, int64) {
	token := int64(r.Period) / int64(r.Limit)
	if token <= 0 {
		token = 1
	}
	emission := token * int64(r.Tokens())
	burstOffset := token * int64(r.EffectiveBurst())
	if tat < now {
		tat = now
	}
	newTAT := tat + emission
	allowAt := newTAT - burstOffset
	diff := now - allowAt
	if diff < 0 {
		return Result{Known: true, Allowed: false, RetryAfter: time.Duration(-diff), ResetAfter: time.Duration(tat - now)}, tat
	}
	return Result{Known: true, Allowed: true, Remaining: int(diff / emission), ResetAfter: time.Duration(newTAT - now)}, newTAT
}
