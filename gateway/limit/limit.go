// Package limit decides whether a request fits its rate limits. Both
// limiters apply redis_rate's GCRA: *Redis keeps the state in Redis so that
// every gateway replica shares one budget per vendor, *Local keeps it in
// process for a single gateway. A refusal is a Decision, not an error;
// errors are for failures (ErrUnavailable), which the gateway answers with
// 503: it never fails open.
//
// How *Redis waits (pipeline.go, conns.go, failure.go): a request's call
// joins the next pipelined batch; a sender makes the round trip under a
// wire deadline of its own (WireTimeout) and reports it to the breaker as
// ONE outcome (a TwoStepCircuitBreaker judging failures in a row or by
// share over a window). The request waits Timeout for its reply, then
// judges Redis by the limiter's sockets, if the node has run on time
// through the last second (lateness.go; a late node leaves the verdict to
// the wire deadline): silent (a request written Timeout ago plus Redis'
// slowest answer of the last second, nothing read since, no reply waiting
// unread) fails it closed with ErrUnavailable; anything else is
// the node being late, and it waits on up to BusyTimeout, then is shed
// with ErrBusy, uncharged when its call was never sent. Those three answers
// stay apart: a Redis failure, an overloaded node, a decision.
//
// Leases (lease.go): a busy bucket's call takes its own token and a lease
// of more, which this gateway spends without asking Redis while Redis
// answers; one Lua script (lua.go) charges, leases and refunds, keeping
// redis_rate's stored value.
package limit

import (
	"errors"
	"time"
)

// ErrUnavailable means the limiter could not decide: Redis refused, timed
// out or its breaker is open. The caller must refuse the request.
var ErrUnavailable = errors.New("rate limiter unavailable")

// MaxChecks is how many limits one request can be subject to: the policies
// of its route's classes, and a shadow twin of each (NewTable refuses a
// table past it). The checks travel by value in an array of this size.
const MaxChecks = 8

// Rate is one limit: Limit requests per Period, with bursts up to Burst
// (Limit when zero). Shadow limits are counted and reported but never
// refuse. Name is the policy name in the RateLimit headers.
type Rate struct {
	Name   string
	Limit  int
	Burst  int
	Period time.Duration
	Shadow bool
}

// burst is the effective burst: Limit when Burst is not set.
func (r Rate) burst() int {
	if r.Burst > 0 {
		return r.Burst
	}
	return r.Limit
}

// Quota is the policy's quota in the RateLimit headers: the burst.
func (r Rate) Quota() int { return r.burst() }

// valid reports whether r can ever allow a request; redis_rate denies every
// call with a zero burst and errors on a zero limit.
func (r Rate) valid() bool { return r.Limit > 0 && r.Period > 0 }

// Check is one limit applied to one bucket. Key names the bucket; keys of
// one request share a Redis Cluster hash tag ("vg:{v:<vendor>}:...").
type Check struct {
	Key  string
	Rate Rate
	// Policy is the index of the policy in its table (usage counts by it);
	// Twin marks the check of the policy's shadow twin.
	Policy int
	Twin   bool
}

// Checks are the limits of one request, passed by value so that a call
// through an interface does not allocate.
type Checks struct {
	Count int              // how many of List are set
	List  [MaxChecks]Check // the first Count are the checks
}

// Add appends c; it ignores checks past MaxChecks and rates that are not set.
func (cs *Checks) Add(c Check) {
	if cs.Count < MaxChecks && c.Rate.valid() {
		cs.List[cs.Count] = c
		cs.Count++
	}
}

// Enforces reports whether any check may refuse the request: one that is
// not a shadow limit.
func (cs *Checks) Enforces() bool {
	for i := 0; i < cs.Count; i++ {
		if !cs.List[i].Rate.Shadow {
			return true
		}
	}
	return false
}

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
	Results [MaxChecks]Result
}

// Left is what check i's bucket holds after the decision, as the RateLimit
// header says it: what remains and how long until it is whole. 0 when the
// bucket refused. When another limit refused the request, one more than
// Remaining and one emission interval less: a decision is all-or-nothing,
// so this bucket's token was not taken (or was given back to its lease),
// where Remaining and ResetAfter are figured as if it had been.
func (d *Decision) Left(i int, r Rate) (remaining int, reset time.Duration) {
	res := d.Results[i]
	switch {
	case !res.Allowed:
		return 0, res.ResetAfter
	case !d.Allowed:
		return min(res.Remaining+1, r.burst()), max(res.ResetAfter-r.Period/time.Duration(r.Limit), 0)
	}
	return res.Remaining, res.ResetAfter
}

// decide fills Allowed, RetryAfter and ShadowDenied from Results.
func (d *Decision) decide(cs *Checks) {
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
func gcra(now, tat int64, r Rate) (Result, int64) {
	emission := int64(r.Period) / int64(r.Limit)
	if emission <= 0 {
		emission = 1
	}
	burstOffset := emission * int64(r.burst())
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
