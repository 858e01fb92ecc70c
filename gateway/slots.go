package gateway

import (
	"vendorgate/gateway/admin"
	"vendorgate/gateway/admission"
	"vendorgate/gateway/auth"
	"vendorgate/gateway/policy"
	"vendorgate/gateway/usage"
)

// recordSlots keeps the books of a request's concurrency policies, once
// their limiter answered (a.SlotsAsked; recordAdmission asks): each
// policy's decision metric and the vendor's usage counts (the refusing policy limited, none charged; all allowed
// when admitted), or each counted unavailable when Redis could not count.
// A call shed (this node's overload) is counted by the limiter, not here.
func (g *Gateway) recordSlots(sn *snapshot, id *auth.Identity, a *admission.Admission, b *policy.Buckets) {
	if a.Refused.Kind == admission.Slots {
		sn.decisions[a.Refused.Policy].Count(admin.Limited)
		id.Usage.Limited(usage.Policy(a.Refused.Policy))
		return
	}
	for i := 0; i < a.Plan.Slots(); i++ {
		_, _, row := a.Plan.Slot(i, b)
		if a.SlotsErr != nil {
			sn.decisions[row].Count(admin.Unavailable)
			continue
		}
		sn.decisions[row].Count(admin.Allowed)
		id.Usage.Allowed(usage.Policy(row))
	}
}
