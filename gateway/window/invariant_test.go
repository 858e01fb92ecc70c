package window_test

import (
	"errors"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"vendorgate/gateway/admission"
	"vendorgate/gateway/concurrency"
	"vendorgate/gateway/inflight"
	"vendorgate/gateway/limit"
	"vendorgate/gateway/policy"
	"vendorgate/gateway/window"
	"vendorgate/shared/testredis"
)

// TestInvariants: two gateways on one Redis, on one test clock, admit
// seeded random requests through admission.Admit, as the gateway does:
// each request counts a sliding window, a daily quota or both, and a GCRA
// limit asked after them (each gateway's own, in process) refuses some
// of those the windows admitted, so that Admit gives their charge back.
// From the outside, on the log of what was admitted, a checker that knows
// nothing of the script replays each decision: a request is refused by
// the windows exactly when one of its windows was full (at most q in any
// w; at most 3q a UTC day), never while they had room; one the GCRA limit
// refused leaves them as they were. A failure prints its seed.
func TestInvariants(t *testing.T) {
	rs := testredis.Start(t)
	caps := inflight.Caps{Requests: 1 << 20, Downloads: 1 << 20}
	for seed := uint64(1); seed <= 8; seed++ {
		var now time.Time
		rng := rand.New(rand.NewPCG(seed, 33))
		const q = 7
		w := time.Duration(1+rng.IntN(20)) * time.Second
		rows := []policy.Policy{
			{Rate: policy.Rate{Name: "s", Limit: q, Period: w, Kind: policy.Sliding}, Class: "slide"},
			{Rate: policy.Rate{Name: "d", Limit: 3 * q, Period: 24 * time.Hour, Kind: policy.Quota, Calendar: policy.Calendar{Days: 1}}, Class: "day"},
			// About a quarter of what the windows admit, refused after them.
			{Rate: policy.Rate{Name: "g", Limit: 3, Burst: 2, Period: time.Second}, Class: "gcra"},
		}
		// The routes: the sliding window, the quota, both; each with the
		// GCRA limit after.
		table, err := policy.NewTable(rows, [][]string{{"slide", "gcra"}, {"day", "gcra"}, {"slide", "day", "gcra"}})
		if err != nil {
			t.Fatal(err)
		}
		buckets := policy.NewLayout(rows, nil).Buckets("sim"+strconv.FormatUint(seed, 10), "key")
		gateway := func() *admission.Admitter {
			ad, err := admission.New(window.NewRedisOnClock(t, rs, &now), limit.NewLocal(limit.LocalOptions{Now: func() time.Time { return now }}),
				inflight.New(), concurrency.NewLocal())
			if err != nil {
				t.Fatal(err)
			}
			return ad
		}
		gateways := []*admission.Admitter{gateway(), gateway()}
		dayRate := rows[1].Rate
		now = time.Date(2026, 3, 1, 23, 58, 0, 0, time.UTC) // the day turns during the run
		var slideLog, dayLog []time.Time                    // admissions
		given := 0                                          // window charges given back for a GCRA refusal
		for i := 0; i < 600; i++ {
			// Steps of 100 ms: requests often fall exactly w after another, the
			// window's edge.
			now = now.Add(time.Duration(rng.IntN(7)) * 100 * time.Millisecond)
			ad := gateways[rng.IntN(2)]
			route := rng.IntN(3)
			useSlide, useDay := route != 1, route != 0
			inSlide := 0
			for _, at := range slideLog {
				if at.After(now.Add(-w)) {
					inSlide++
				}
			}
			start, _ := dayRate.Calendar.Window(now)
			inDay := 0
			for _, at := range dayLog {
				if !at.Before(start) {
					inDay++
				}
			}
			want := (!useSlide || inSlide < q) && (!useDay || inDay < 3*q)
			var a admission.Admission
			err := ad.Admit(&a, &admission.Request{Table: table, Route: route, Buckets: buckets, Vendor: "v", Caps: caps})
			refused := a.Refused.Kind
			if err != nil && !errors.Is(err, admission.ErrRefused) {
				t.Fatal(err)
			}
			if windowsAdmitted := refused != admission.Windows; windowsAdmitted != want {
				t.Fatalf("seed %d request %d at %v: the windows admitted %v (refused by %v), the replay says %v (%d of %d in the last %v, %d of %d today)",
					seed, i, now, windowsAdmitted, refused, want, inSlide, q, w, inDay, 3*q)
			}
			if refused != admission.None {
				given += btoi(refused == admission.Rates)
				continue
			}
			a.Release()
			if useSlide {
				slideLog = append(slideLog, now)
			}
			if useDay {
				dayLog = append(dayLog, now)
			}
		}
		if given == 0 {
			t.Fatalf("seed %d: the GCRA limit refused nothing the windows admitted: no charge was given back", seed)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
