package gateway

import (
	"errors"

	"vendorgate/gateway/admin"
	"vendorgate/gateway/admission"
	"vendorgate/gateway/auth"
	"vendorgate/gateway/limit"
	"vendorgate/gateway/policy"
	"vendorgate/gateway/usage"
)

// recordAdmission keeps the books of a request's admission, kind by
// kind, for those that decided or failed (a call this node shed is
// counted by its limiter): the windows' and GCRA limits' decisions, the
// in-flight cap that refused, the concurrency policies' slots.
func (g *Gateway) recordAdmission(sn *snapshot, id *auth.Identity, a *admission.Admission, b *policy.Buckets) {
	if w := a.Windows; w != nil && w.Asked {
		g.recordWindows(sn, id, w)
	}
	if a.Decided || a.RatesErr != nil {
		g.recordLimits(sn, id, &a.Checks, &a.Decision, a.RatesErr)
	}
	if a.Refused.Kind == admission.InFlight {
		g.inFlightRefused[a.Refused.InFlight].Inc()
	}
	if a.SlotsAsked { // a route without concurrency policies costs no call
		g.recordSlots(sn, id, a, b)
	}
}

// recordLimits keeps the books of one limiter decision: the decision
// metric of each check (its counters resolved in sn), the vendor's usage counts by policy index, and a
// log line for each refusal a shadow limit would have made. err is the
// limiter's failure (every check counted unavailable), except a request
// shed because the node cannot keep up (limit.ErrBusy, counted apart).
func (g *Gateway) recordLimits(sn *snapshot, id *auth.Identity, cs *policy.Checks, d *limit.Decision, err error) {
	if errors.Is(err, limit.ErrBusy) {
		return // shed: counted by the limiter, not a decision
	}
	if err != nil {
		for i := 0; i < cs.Count; i++ {
			if !cs.List[i].Twin { // a request, not its shadow twin
				sn.decisions[cs.List[i].Policy].Count(admin.Unavailable)
			}
		}
		return
	}
	for i := 0; i < cs.Count; i++ {
		r := &d.Results[i]
		g.recordCheck(sn, id, &cs.List[i], r.Known, r.Allowed)
	}
}

// recordCheck keeps the books of one check c that was decided (recordLimits,
// recordWindows): its decision metric, the vendor's usage counts by policy
// index, and a log line when a shadow limit would have refused. known is
// false when the check was not consulted (a remembered denial answered).
func (g *Gateway) recordCheck(sn *snapshot, id *auth.Identity, c *policy.Check, known, allowed bool) {
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
		g.log.Warn("shadow limit would refuse", "limit", c.Rate.Name, "vendor_id", id.VendorID, "key_id", id.KeyID)
	default:
		outcome = admin.Limited
	}
	sn.decisions[c.Policy].Count(outcome)
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
