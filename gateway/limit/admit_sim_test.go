package limit_test

import (
	"errors"
	"time"

	"vendorgate/gateway/admission"
	"vendorgate/gateway/concurrency"
	"vendorgate/gateway/inflight"
	"vendorgate/gateway/limit"
	"vendorgate/gateway/window"
)

// The lease simulation's requests go through admission.Admit, each
// gateway's own over its simulated GCRA limiter and in-process windows,
// in-flight counts and concurrency slots, so that the composition is
// searched with the leases: a request a window refuses never reaches the
// GCRA limiter; one an in-flight cap or a concurrency slot refuses after
// the GCRA limiter admitted it keeps its tokens charged (nothing of a
// GCRA decision is given back for a later refusal), which the bound
// holds the gateways to.
func init() { limit.SimAdmit = simAdmit }

func simAdmit(r *limit.Redis, now func() time.Time) func(limit.SimRequest) limit.SimAdmitted {
	ad, err := admission.New(window.NewLocal(now), r, inflight.New(), concurrency.NewLocal())
	if err != nil {
		panic(err) // no limiter is nil
	}
	return func(q limit.SimRequest) limit.SimAdmitted {
		a := new(admission.Admission)
		err := ad.Admit(a, &admission.Request{Table: q.Table, Buckets: q.Buckets, Vendor: q.Vendor,
			Caps: inflight.Caps{Requests: q.InFlight, Downloads: q.InFlight}})
		out := limit.SimAdmitted{Decision: a.Decision, Release: a.Release}
		if errors.Is(err, admission.ErrRefused) {
			out.Refused = a.Refused.Kind.String()
		} else {
			out.Err = err
		}
		return out
	}
}
