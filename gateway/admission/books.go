// books.go keeps the books of an Admission once it is decided (Books),
// kind by kind: each limit's decision metric, the vendor's usage counts by
// policy, a log line for each refusal a shadow limit would have made, and
// the in-flight cap that refused. It holds the one call (Books.Admission)
// and the GCRA limits' books; bookwindows.go the quotas' and sliding
// windows', bookslots.go the concurrency policies'.

package admission

import (
	"errors"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"vendorgate/gateway/admin"
	"vendorgate/gateway/auth"
	"vendorgate/gateway/inflight"
	"vendorgate/gateway/limit"
	"vendorgate/gateway/policy"
	"vendorgate/gateway/usage"
)

// Books keeps the books of admissions. Its calls take the decision
// counters of the policy table in force by row (a check's Policy index),
// resolved once per load, so that a request counts by index.
type Books struct {
	log *slog.Logger // the shadow limits' lines
	// inFlightRefused counts the refusals by the in-flight cap that
	// refused.
	inFlightRefused [inflight.OverDownloads + 1]prometheus.Counter
}

// NewBooks returns Books that log to log and count in-flight refusals in
// inFlightRefused (gwmetrics.Hooks.RegisterInFlight). By value: the
// gateway keeps them in place.
func NewBooks(log *slog.Logger, inFlightRefused [inflight.OverDownloads + 1]prometheus.Counter) Books {
	return Books{log: log, inFlightRefused: inFlightRefused}
}

// Admission keeps the books of a request's admission, kind by
// kind, for those that decided or failed (a call this node shed is
// counted by its limiter): the windows' and GCRA limits' decisions, the
// in-flight cap that refused, the concurrency policies' slots.
func (bk *Books) Admission(decisions []*admin.Decisions, id *auth.Identity, a *Admission, b *policy.Buckets) {
	if w := a.Windows; w != nil && w.Asked {
		bk.windows(decisions, id, w)
	}
	if a.Decided || a.RatesErr != nil {
		bk.limits(decisions, id, &a.Checks, &a.Decision, a.RatesErr)
	}
	if a.Refused.Kind == InFlight {
		bk.inFlightRefused[a.Refused.InFlight].Inc()
	}
	if a.SlotsAsked { // a route without concurrency policies costs no call
		bk.slots(decisions, id, a, b)
	}
}

// limits keeps the books of one limiter decision: the decision metric of
// each check, the vendor's usage counts by policy index, and a log line
// for each refusal a shadow limit would have made. err is the limiter's
// failure (every check counted unavailable), except a request shed
// because the node cannot keep up (limit.ErrBusy, counted apart).
func (bk *Books) limits(decisions []*admin.Decisions, id *auth.Identity, cs *policy.Checks, d *limit.Decision, err error) {
	if err != nil {
		if errors.Is(err, limit.ErrBusy) {
			return // shed: counted by the limiter, not a decision
		}
		for i := 0; i < cs.Count; i++ {
			if !cs.List[i].Twin { // a request, not its shadow twin
				decisions[cs.List[i].Policy].Count(admin.Unavailable)
			}
		}
		return
	}
	for i := 0; i < cs.Count; i++ {
		r := &d.Results[i]
		bk.check(decisions, id, &cs.List[i], r.Known, r.Allowed)
	}
}

// check keeps the books of one check c that was decided (limits,
// windows): its decision metric, the vendor's usage counts by policy
// index, and a log line when a shadow limit would have refused. known is
// false when the check was not consulted (a remembered denial answered).
func (bk *Books) check(decisions []*admin.Decisions, id *auth.Identity, c *policy.Check, known, allowed bool) {
	p := usage.Policy(c.Policy)
	outcome := admin.Allowed
	switch {
	case c.Rate.Shadow && !known:
		return // a shadow limit not consulted (a remembered denial answered)
	case !known:
		outcome = admin.Limited
	case allowed:
	case c.Rate.Shadow:
		outcome = admin.ShadowLimited
		bk.log.Warn("shadow limit would refuse", "limit", c.Rate.Name, "vendor_id", id.VendorID, "key_id", id.KeyID)
	default:
		outcome = admin.Limited
	}
	decisions[c.Policy].Count(outcome)
	switch outcome {
	case admin.Limited:
		id.Usage.Limited(p)
	case admin.ShadowLimited:
		id.Usage.ShadowLimited(p)
	}
	// Allowed counts once per policy: by the policy's own check when it
	// is enforced and allowed, or when it is a shadow policy (a twin
	// only adds shadow refusals).
	if !c.Twin && (!c.Rate.Shadow && outcome == admin.Allowed || c.Rate.Shadow) {
		id.Usage.Allowed(p)
	}
}
