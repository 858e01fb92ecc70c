package gateway

import (
	"time"

	"vendorgate/gateway/admin"
	"vendorgate/gateway/admission"
	"vendorgate/gateway/auth"
	"vendorgate/gateway/policy"
)

// recordWindows keeps the books of the windowed checks, as recordLimits
// does of the GCRA ones: decision metrics, usage counts by policy index
// and a log line for each refusal a shadow window would have made.
func (g *Gateway) recordWindows(sn *snapshot, id *auth.Identity, w *admission.Windowed) {
	cs := &w.Checks
	for i := 0; i < cs.Count; i++ {
		c := &cs.List[i]
		if w.Err != nil {
			sn.decisions[c.Policy].Count(admin.Unavailable)
			continue
		}
		// Always decided, and never a twin (a window has none).
		g.recordCheck(sn, id, c, true, w.Decision.Results[i].Allowed)
	}
}

// appendWindowHeaders appends the enforced windowed checks to the
// RateLimit-Policy value pol ("name";q=limit;w=the window's seconds) and
// the decided ones to the RateLimit value state (r what remains, t the
// seconds until the window is whole again).
func appendWindowHeaders(pol, state []byte, w *admission.Windowed) ([]byte, []byte) {
	for i := 0; i < w.Checks.Count; i++ {
		rt := &w.Checks.List[i].Rate
		if rt.Shadow {
			continue
		}
		res := &w.Decision.Results[i]
		span := rt.Period
		if w.Decided {
			span = res.Window
		} else if rt.Kind == policy.Quota {
			s, e := rt.Calendar.Window(time.Now())
			span = e.Sub(s)
		}
		pol = policy.AppendPolicy(pol, rt.Name, rt.Limit, span)
		if !w.Decided {
			continue
		}
		rem, reset := w.Decision.Left(i)
		state = policy.AppendState(state, rt.Name, rem, reset)
	}
	return pol, state
}
