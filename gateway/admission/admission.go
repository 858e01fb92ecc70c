// Package admission admits a request under every kind of limit in one
// call: Admitter.Admit asks each kind in the order of the list kinds,
// stops at the first that refuses, and gives back what the kinds before
// it charged, so that a request is charged by every limit or by none.
// What it returns (an Admission) carries each kind's decision, for the
// RateLimit headers, the usage books and the metrics; the one that
// refused, named (Refusal: its kind, its row, what it allows, when to
// retry); and Release and Refund, for when the answer is done or failed
// for the backend.
//
// The kinds, in their order (kinds):
//
//   - Windows: quotas and sliding windows (package window), one call,
//     all-or-nothing within itself;
//   - Rates: GCRA limits with leases (package limit);
//   - InFlight: the vendor's requests in flight at this gateway (package
//     inflight);
//   - Slots: concurrency policies' slots over every replica (package
//     concurrency).
//
// A new kind is a Kind, an entry in kinds, its step in Admit (in the
// order of kinds) and its undo in giveBack.
//
// admission.go is the call and what it returns; refusal.go names a
// refusal (the 429 message); books.go, bookwindows.go and bookslots.go
// keep the books of an Admission once it is decided (Books: the decision
// metrics, the usage counts, the shadow limits' log lines), which the
// caller asks for with Books.Admission after Admit.
package admission

import (
	"errors"
	"fmt"
	"sync"

	"vendorgate/gateway/concurrency"
	"vendorgate/gateway/inflight"
	"vendorgate/gateway/limit"
	"vendorgate/gateway/policy"
	"vendorgate/gateway/window"
)

// Kind is a kind of limit.
type Kind uint8

// The kinds of limit; None is no refusal.
const (
	None Kind = iota
	Windows
	Rates
	InFlight
	Slots
)

// kinds is the order Admit asks the kinds in: the windows first (a quota
// is the scarcest and its one call is all-or-nothing within itself), then
// the GCRA limits, then what the request holds until its answer is done,
// this gateway's slot before the replicas'.
var kinds = [...]Kind{Windows, Rates, InFlight, Slots}

// String names the kind (the access log, tests).
func (k Kind) String() string {
	switch k {
	case Windows:
		return "window"
	case Rates:
		return "gcra"
	case InFlight:
		return "in_flight"
	case Slots:
		return "concurrency"
	}
	return "none"
}

// WindowLimiter decides quotas and sliding windows (window.Limiter).
type WindowLimiter interface {
	Charge(cs policy.Checks) (window.Decision, error)
	Refund(cs policy.Checks, d window.Decision) window.Decision
}

// RateLimiter decides GCRA limits (limit.Redis, limit.Local). By value:
// a pointer into the request's Admission passed through an interface
// would move it to the heap on every request.
type RateLimiter interface {
	Allow(cs policy.Checks) (limit.Decision, error)
	// Refund gives back what d charged for the checks of policies that
	// refund; it returns how many buckets it gave back.
	Refund(cs policy.Checks, d limit.Decision) int
}

// InFlightCounter counts a vendor's requests in flight here
// (inflight.Counter).
type InFlightCounter interface {
	Acquire(vendor string, caps inflight.Caps, download bool) (inflight.Slot, inflight.Refusal)
}

// SlotLimiter takes concurrency policies' slots (concurrency.Limiter).
type SlotLimiter interface {
	Acquire(ss *concurrency.Slots) (held *concurrency.Held, refused int, err error)
}

// Admitter admits requests under its limiters, each a kind of limit.
type Admitter struct {
	windows  WindowLimiter
	rates    RateLimiter
	inFlight InFlightCounter
	slots    SlotLimiter
	// slotLists are the requests' lists of slots to take, reused: a list
	// passed to the limiter (an interface) would be an allocation a
	// request.
	slotLists sync.Pool
}

// New returns an Admitter; it refuses a nil limiter.
func New(w WindowLimiter, r RateLimiter, f InFlightCounter, s SlotLimiter) (*Admitter, error) {
	if w == nil || r == nil || f == nil || s == nil {
		return nil, errors.New("admission: a limiter is missing")
	}
	ad := &Admitter{windows: w, rates: r, inFlight: f, slots: s}
	ad.slotLists.New = func() any { return new(concurrency.Slots) }
	return ad, nil
}

// Request is what a request is admitted by: its route's plan under its
// vendor's table, its key's bucket names, and its vendor's caps here.
type Request struct {
	Table   *policy.Table
	Route   int // the plan's index in Table
	Buckets *policy.Buckets
	Vendor  string
	// InFlight are the vendor's counts (nil: found by Vendor).
	InFlight *inflight.Counts
	Caps     inflight.Caps
	Download bool // a report download (the in-flight downloads cap)
}

// Admission is one request's admission: each kind's decision, the refusal
// if any, and what the request holds. It is filled in place (Admit), so
// that a request's admission costs no allocation but the windows' on a
// route that has any.
type Admission struct {
	// Plan is the route's plan; Checks its GCRA checks and Decision their
	// decision, valid when Decided (the limiter answered).
	Plan     *policy.Plan
	Checks   policy.Checks
	Decision limit.Decision
	Decided  bool
	// RatesErr is the GCRA limiter's failure when it did not decide (nil
	// when it did, or was not asked).
	RatesErr error
	// Windows is the quota and sliding window checks, nil for a route
	// without any.
	Windows *Windowed
	// Slot is what the request holds until its answer is done (its
	// in-flight slot here, then its concurrency slots): Release gives it
	// back; a streamed answer takes it (proxy.Forward).
	Slot interface{ Release() }
	// SlotsAsked: the route counts concurrency policies and their limiter
	// answered (SlotsErr nil) or failed (SlotsErr).
	SlotsAsked bool
	SlotsErr   error
	// Refused is the limit that refused the request; Kind None when none.
	Refused Refusal

	// the Admitter whose limiters charged, for giveBack and Refund (one
	// pointer written per request, not two interface values)
	ad *Admitter
}

// Windowed is a request's quota and sliding window checks: their
// decision, valid when Decided, and Err the limiter's failure when it did
// not decide. Asked is false when the limiter shed the call (this node's
// overload: no decision to count).
type Windowed struct {
	Checks   policy.Checks
	Decision window.Decision
	Decided  bool
	Asked    bool
	Err      error
}

// Admit admits the request under every kind of limit, in the order of
// kinds, filling a. It returns nil when admitted (a.Slot then holds what
// must be released), ErrRefused when a limit refused (a.Refused names
// it), or the
// error of a limiter that could not decide an enforced limit:
// limit.ErrUnavailable (wrapped) when Redis could not count, limit.ErrBusy
// when this node shed the call. Whatever refuses, or fails, after other
// kinds charged, they are given back here: charged by all or by none.
func (ad *Admitter) Admit(a *Admission, r *Request) error {
	a.ad = ad
	a.Plan = r.Table.Plan(r.Route)
	a.Plan.Checks(&a.Checks, r.Buckets)
	// The steps in the order of kinds, written out: a loop over kinds
	// with a switch costs its iterations on every request; and a kind the
	// route has none of (windows, slots) costs no call.
	if a.Plan.Windowed() {
		if err := ad.admitWindows(a, r); err != nil {
			return err // nothing charged before the windows
		}
	}
	if err := ad.admitRates(a); err != nil {
		a.giveBack(kinds[:1])
		return err
	}
	if err := ad.admitInFlight(a, r); err != nil {
		a.giveBack(kinds[:2])
		return err
	}
	if a.Plan.Slots() > 0 {
		if err := ad.admitSlots(a, r); err != nil {
			a.giveBack(kinds[:3])
			return err
		}
	}
	return nil
}

// giveBack undoes what the kinds done charged, the last first.
func (a *Admission) giveBack(done []Kind) {
	for i := len(done) - 1; i >= 0; i-- {
		switch done[i] {
		case Windows:
			if w := a.Windows; w != nil && w.Decided {
				w.Decision = a.ad.windows.Refund(w.Checks, w.Decision)
			}
		case Rates:
			// A GCRA decision is never given back for a refusal after it:
			// its tokens stand, as a request's do (limits.md).
		case InFlight, Slots:
			a.Release()
		}
	}
}

// admitWindows is the windows' step, for a plan that has any.
func (ad *Admitter) admitWindows(a *Admission, r *Request) error {
	// Its own allocation (about 1.3 KB), so that the admission of a route
	// without windows stays as small as before.
	w := new(Windowed)
	a.Windows = w
	a.Plan.Windows(&w.Checks, r.Buckets)
	var err error
	w.Decision, err = ad.windows.Charge(w.Checks)
	w.Asked = !errors.Is(err, limit.ErrBusy) // this node's overload, not Redis'
	switch {
	case err == nil:
		w.Decided = true
		if !w.Decision.Allowed {
			return a.refuse(windowRefusal(&w.Checks, &w.Decision))
		}
	case !w.Checks.Enforces():
		w.Err = err // only shadow windows: counted unavailable, the request goes on
	case !w.Asked:
		return err // 503 request_failed, as a GCRA call shed
	default:
		w.Err = err
		return limit.ErrUnavailable // 503 rate_limit_unavailable: never fail open
	}
	return nil
}

func (ad *Admitter) admitRates(a *Admission) error {
	// The limiters by their own types: their Decide writes the decision
	// in place, where a call through the interface would move the
	// request's Admission to the heap (RateLimiter).
	var err error
	switch l := ad.rates.(type) {
	case *limit.Redis:
		err = l.Decide(&a.Checks, &a.Decision)
	case *limit.Local:
		err = l.Decide(&a.Checks, &a.Decision)
	default:
		a.Decision, err = ad.rates.Allow(a.Checks)
	}
	if err != nil {
		a.RatesErr = err
		if !a.Checks.Enforces() {
			// Only shadow limits: they refuse nobody, so a limiter that
			// cannot decide takes nothing from the vendor; the request
			// goes on.
			return nil
		}
		return err
	}
	a.Decided = true
	if !a.Decision.Allowed {
		return a.refuse(rateRefusal(&a.Checks, &a.Decision))
	}
	return nil
}

func (ad *Admitter) admitInFlight(a *Admission, r *Request) error {
	var slot inflight.Slot
	var refused inflight.Refusal
	if r.InFlight != nil {
		slot, refused = r.InFlight.Acquire(r.Caps, r.Download)
	} else {
		slot, refused = ad.inFlight.Acquire(r.Vendor, r.Caps, r.Download)
	}
	if refused != inflight.Admitted {
		return a.refuse(inFlightRefusal(refused, r.Caps))
	}
	a.Slot = slot
	return nil
}

// admitSlots is the slots' step, for a plan that counts any.
func (ad *Admitter) admitSlots(a *Admission, r *Request) error {
	n := a.Plan.Slots()
	ss := ad.slotLists.Get().(*concurrency.Slots)
	defer ad.slotLists.Put(ss) // the limiter keeps none of it
	ss.Count = 0
	for i := 0; i < n; i++ {
		key, limit, row := a.Plan.Slot(i, r.Buckets)
		ss.Add(concurrency.Slot{Key: key, Cap: limit, Policy: row})
	}
	held, refused, err := ad.slots.Acquire(ss)
	if err != nil && errors.Is(err, limit.ErrBusy) {
		return err // shed: this node's overload, counted by the limiter, not a decision
	}
	a.SlotsAsked = true
	if err != nil {
		a.SlotsErr = err
		return fmt.Errorf("%w: %w", limit.ErrUnavailable, err)
	}
	if refused >= 0 {
		s := &ss.List[refused]
		return a.refuse(slotRefusal(r.Table.Policies[s.Policy].Name, s.Policy, s.Cap))
	}
	held.Then, a.Slot = a.Slot, held
	return nil
}

// Release gives back what the request holds (its in-flight and
// concurrency slots), once; nothing when a streamed answer took it.
func (a *Admission) Release() {
	if a.Slot != nil {
		a.Slot.Release()
		a.Slot = nil
	}
}

// Refund gives back the GCRA tokens of a request the gateway failed for
// the backend, for the policies that refund: given is how many buckets
// went back, charged how many were charged under such policies.
func (a *Admission) Refund() (given, charged int) {
	if !a.Decided || !a.Decision.Allowed {
		return 0, 0 // nothing charged
	}
	given = a.ad.rates.Refund(a.Checks, a.Decision)
	for i := 0; i < a.Checks.Count; i++ {
		if r := a.Decision.Results[i]; a.Checks.List[i].Rate.Refund && r.Known && r.Allowed {
			charged++
		}
	}
	return given, charged
}

// Outcome is the limiter's verdict on the request for the access log:
// "limited" when any kind refused it, "allowed" when the GCRA limiter
// admitted it (and no kind after it refused), "" otherwise (the caller
// tells a limiter that could not decide).
func (a *Admission) Outcome() string {
	switch {
	case a.Refused.Kind != None:
		return "limited"
	case a.Decided && a.Decision.Allowed:
		return "allowed"
	}
	return ""
}

// ErrRefused is Admit's error when a limit refused the request: its
// Admission's Refused names it. (A sentinel: an error pointing into the
// Admission would move the caller's request state to the heap.)
var ErrRefused = errors.New("admission: refused by a limit")

// refuse keeps r as the request's refusal.
func (a *Admission) refuse(r Refusal) error {
	a.Refused = r
	return ErrRefused
}
