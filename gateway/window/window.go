// Package window decides the limits that count requests in a window rather
// than in a token bucket: a Quota (at most q in each calendar window: a UTC
// day, a UTC month, or a span of days) and a Sliding window (at most q in
// any w seconds). Unless every check of a request is a quota its row
// leases (lease.go), each request's check is one round trip to Redis,
// exact across gateway replicas, made only for the routes that have such a
// policy (package limit decides the GCRA rows).
//
// A quota is one counter per window ("win:<bucket>:q<window start>", expiring
// an hour after the window ends); a sliding window is one sorted set per
// bucket, one member per request admitted in the last w seconds, scored by
// the Redis clock in milliseconds ("win:<bucket>"). A bucket's name holds
// its vendor's hash tag, so that a Redis Cluster keeps a request's keys,
// the quota counters the script names from them included, in one slot. Redis's clock (TIME) is the one clock:
// every replica's request falls in the same window.
//
// A request's checks are all-or-nothing: Charge charges every bucket only
// when no enforced check refuses, and Refund takes back exactly what a
// Charge took (a quota's counter is decremented in the window it was
// charged in, a sliding window's member removed), for a request another
// limit refused afterwards. Neither call is ever retried: a call whose
// answer was lost is a failure (ErrUnavailable), so nothing is charged
// twice; a Refund lost leaves the charge in place (the vendor is charged
// one request too many, never one too few).
package window

import (
	"errors"
	"strconv"
	"time"

	"vendorgate/gateway/policy"
)

// ErrUnavailable means the window limiter could not decide: the caller
// must refuse the request (503 rate_limit_unavailable) unless every check
// is a shadow check.
var ErrUnavailable = errors.New("window limiter unavailable")

// Result is one check's state after a Charge.
type Result struct {
	Allowed bool
	// Used is how many the window holds after the decision (this
	// request's charge included when the decision admitted it).
	Used int
	// Remaining is how many more fit now.
	Remaining int
	// RetryAfter is when the next request fits; 0 when allowed.
	RetryAfter time.Duration
	// ResetAfter is when the window is whole again: a quota's turn, a
	// sliding window's last entry leaving it.
	ResetAfter time.Duration
	// Window is the window's length (w): a quota's calendar window, a
	// sliding window's period.
	Window time.Duration
	// start is the quota window's start (Unix seconds) the request was
	// charged in; charged says the request was charged (for Refund).
	start   int64
	charged bool
}

// Decision is the answer for one request's windowed checks. Allowed
// considers only enforced checks; the request was charged only when it is
// true.
type Decision struct {
	Allowed    bool
	RetryAfter time.Duration
	Count      int
	Results    [policy.MaxChecks]Result
	// id names the charge (a sliding window's member); leased: the
	// charges were spent from this gateway's leases (a refund goes back
	// to them).
	id     string
	leased bool
}

// Left is what check i's window holds after the decision, for the
// RateLimit header: what remains and when the window is whole again (0
// when this check refused). A request refused, or refunded, left its room.
func (d *Decision) Left(i int) (remaining int, reset time.Duration) {
	r := d.Results[i]
	if !r.Allowed {
		return 0, r.ResetAfter
	}
	return r.Remaining, r.ResetAfter
}

// refunded marks check i's charge as given back.
func (r *Result) refunded(limit int) {
	r.charged = false
	r.Used = max(r.Used-1, 0)
	r.Remaining = max(limit-r.Used, 0)
}

// decide fills each result's Remaining (from its Used) and clears the
// RetryAfter of those allowed, then fills Allowed and RetryAfter from
// Results.
func (d *Decision) decide(cs *policy.Checks) {
	d.Count = cs.Count
	d.Allowed = true
	for i := 0; i < cs.Count; i++ {
		r := &d.Results[i]
		r.Remaining = max(cs.List[i].Rate.Limit-r.Used, 0)
		if r.Allowed {
			r.RetryAfter = 0
		}
		if r.Allowed || cs.List[i].Rate.Shadow {
			continue
		}
		d.Allowed = false
		d.RetryAfter = max(d.RetryAfter, r.RetryAfter)
	}
}

// Limiter decides windowed checks: *Redis across replicas, *Local in
// process for a single gateway.
type Limiter interface {
	// Charge decides cs and, when every enforced check allows it, charges
	// each check that has room (a shadow check over its limit is not
	// charged). An error means nothing was decided. The checks are passed
	// by value, so that a call through the interface does not make the
	// caller's copy escape.
	Charge(cs policy.Checks) (Decision, error)
	// Refund takes back what Charge charged for d, best effort, and
	// returns d as it stands after (nothing left to refund).
	Refund(cs policy.Checks, d Decision) Decision
	// Used is how much of a quota bucket's current window is used, and
	// when the window began and ends.
	Used(key string, r policy.Rate) (used int, start, end time.Time, err error)
}

// quotaKey is the counter of the quota window starting at start (Unix
// seconds) of bucket key.
func quotaKey(key string, start int64) string {
	return key + ":q" + strconv.FormatInt(start, 10)
}
