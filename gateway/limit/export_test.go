package limit

import (
	"time"

	"vendorgate/gateway/policy"
)

// SimAdmit makes the lease simulation (TestSimulation) admit its requests
// through package admission, as the gateway does: package admission
// imports this one, so admit_sim_test.go, a test outside the package, sets
// it. For each simulated gateway it is called once, with that gateway's
// limiter and wall clock, and returns the gateway's admit. Compiled into
// tests only.
var SimAdmit func(r *Redis, now func() time.Time) func(SimRequest) SimAdmitted

// SimRequest is one simulated request: its key's table (route 0), its
// buckets, its vendor and the vendor's cap of requests in flight at the
// gateway.
type SimRequest struct {
	Table    *policy.Table
	Buckets  *policy.Buckets
	Vendor   string
	InFlight int32
}

// SimAdmitted is what Admit made of a SimRequest: the GCRA decision (zero
// when no GCRA limit was asked), the kind that refused the request ("" for
// none; "gcra" when the GCRA decision refused), an error that was no
// refusal, and the request's Release (its in-flight and concurrency
// slots).
type SimAdmitted struct {
	Decision Decision
	Refused  string
	Err      error
	Release  func()
}
