package gateway

import (
	"time"

	"github.com/valyala/fasthttp"

	"vendorgate/gateway/admission"
	"vendorgate/gateway/policy"
	"vendorgate/gateway/respond"
)

// The RateLimit-Policy and RateLimit fields of an answer (finish), from
// the request's admission.

// setRateLimitHeaders writes the IETF draft's RateLimit-Policy and
// RateLimit fields for the enforced limits of the request: r is the
// remaining quota, t the seconds until the bucket is whole again. The GCRA
// limits come first, then the quotas and sliding windows.
func setRateLimitHeaders(ctx *fasthttp.RequestCtx, ex *exchange) {
	pol := ex.adm.Plan.Policy
	if len(pol) == 0 && ex.adm.Windows == nil {
		return // no enforced limit (shadow ones only): no header
	}
	// Room for MaxChecks entries of a 32-byte name and 10-digit numbers:
	// a full table's answer allocates no larger buffer.
	var buf [policy.MaxChecks * 64]byte
	b := buf[:0]
	for i := 0; i < ex.adm.Checks.Count && ex.adm.Decided; i++ {
		rt := ex.adm.Checks.List[i].Rate
		res := ex.adm.Decision.Results[i]
		if rt.Shadow || !res.Known {
			continue
		}
		rem, reset := ex.adm.Decision.Left(i, rt) // a refusal took no token
		b = policy.AppendState(b, rt.Name, rem, reset)
	}
	if ex.adm.Windows != nil {
		var pbuf [policy.MaxChecks * 64]byte
		pol, b = appendWindowHeaders(append(pbuf[:0], pol...), b, ex.adm.Windows)
	}
	if len(pol) == 0 {
		return
	}
	respond.SetRateLimit(ctx, pol, b)
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
