package admission

import (
	"vendorgate/gateway/admin"
	"vendorgate/gateway/auth"
)

// windows keeps the books of the windowed checks, as limits does of the
// GCRA ones: decision metrics, usage counts by policy index and a log
// line for each refusal a shadow window would have made.
func (bk *Books) windows(decisions []*admin.Decisions, id *auth.Identity, w *Windowed) {
	cs := &w.Checks
	for i := 0; i < cs.Count; i++ {
		c := &cs.List[i]
		if w.Err != nil {
			decisions[c.Policy].Count(admin.Unavailable)
			continue
		}
		// Always decided, and never a twin (a window has none).
		bk.check(decisions, id, c, true, w.Decision.Results[i].Allowed)
	}
}
