package admission

import (
	"vendorgate/gateway/admin"
	"vendorgate/gateway/auth"
	"vendorgate/gateway/policy"
	"vendorgate/gateway/usage"
)

// slots keeps the books of a request's concurrency policies, once their
// limiter answered (a.SlotsAsked; Admission asks): each policy's decision
// metric and the vendor's usage counts (the refusing policy limited, none
// charged; all allowed when admitted), or each counted unavailable when
// Redis could not count. A call shed (this node's overload) is counted by
// the limiter, not here.
func (bk *Books) slots(decisions []*admin.Decisions, id *auth.Identity, a *Admission, b *policy.Buckets) {
	if a.Refused.Kind == Slots {
		decisions[a.Refused.Policy].Count(admin.Limited)
		id.Usage.Limited(usage.Policy(a.Refused.Policy))
		return
	}
	for i := 0; i < a.Plan.Slots(); i++ {
		_, _, row := a.Plan.Slot(i, b)
		if a.SlotsErr != nil {
			decisions[row].Count(admin.Unavailable)
			continue
		}
		decisions[row].Count(admin.Allowed)
		id.Usage.Allowed(usage.Policy(row))
	}
}
