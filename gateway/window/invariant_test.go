package window

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"vendorgate/gateway/policy"
	"vendorgate/shared/testredis"
)

// TestInvariants: two limiters (two gateways) on one Redis, on one test
// clock, take seeded random requests, a sliding window and a daily quota
// each, and give back a random share of what they admitted (a GCRA limit
// refused after). From the outside, on the log of what was admitted and
// given back, a checker that knows nothing of the script replays each
// decision: no window ever holds more than its limit (at most q in any
// w; at most q a UTC day), and no request was refused while its window
// had room (exact, not merely safe). A failure prints its seed.
func TestInvariants(t *testing.T) {
	rs := testredis.Start(t)
	for seed := uint64(1); seed <= 8; seed++ {
		var now time.Time
		a, b := newRedisLimiter(t, rs, &now), newRedisLimiter(t, rs, &now)
		rng := rand.New(rand.NewPCG(seed, 33))
		const q = 7
		w := time.Duration(1+rng.IntN(20)) * time.Second
		vendor := "vg:{v:sim" + strconv.FormatUint(seed, 10) + "}:"
		slide := policy.Check{Key: vendor + "s", Rate: sliding("s", q, w)}
		day := policy.Check{Key: vendor + "d", Rate: quota("d", 3*q, policy.Calendar{Days: 1})}
		now = time.Date(2026, 3, 1, 23, 58, 0, 0, time.UTC) // the day turns during the run
		var slideLog, dayLog []time.Time                    // admissions not given back
		for i := 0; i < 600; i++ {
			// Steps of 100 ms: requests often fall exactly w after another, the
			// window's edge.
			now = now.Add(time.Duration(rng.IntN(7)) * 100 * time.Millisecond)
			l := a
			if rng.IntN(2) == 1 {
				l = b
			}
			var cs policy.Checks
			useSlide, useDay := rng.IntN(3) > 0, rng.IntN(3) > 0
			if useSlide {
				cs.Add(slide)
			}
			if useDay {
				cs.Add(day)
			}
			if cs.Count == 0 {
				continue
			}
			inSlide := 0
			for _, at := range slideLog {
				if at.After(now.Add(-w)) {
					inSlide++
				}
			}
			start, _ := day.Rate.Calendar.Window(now)
			inDay := 0
			for _, at := range dayLog {
				if !at.Before(start) {
					inDay++
				}
			}
			want := (!useSlide || inSlide < q) && (!useDay || inDay < 3*q)
			d, err := l.Charge(cs)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed != want {
				t.Fatalf("seed %d request %d at %v: allowed %v, the replay says %v (%d of %d in the last %v, %d of %d today)",
					seed, i, now, d.Allowed, want, inSlide, q, w, inDay, 3*q)
			}
			if !d.Allowed {
				continue
			}
			if rng.IntN(4) == 0 { // another limit refused: given back, by the other gateway's clock alike
				l.Refund(cs, d)
				continue
			}
			if useSlide {
				slideLog = append(slideLog, now)
			}
			if useDay {
				dayLog = append(dayLog, now)
			}
		}
		// The log itself: at most q in any w, at most 3q a day.
		for i, at := range slideLog {
			n := 0
			for _, x := range slideLog[:i+1] {
				if x.After(at.Add(-w)) {
					n++
				}
			}
			if n > q {
				t.Fatalf("seed %d: %d admitted in the %v before %v, limit %d", seed, n, w, at, q)
			}
		}
		perDay := map[int64]int{}
		for _, at := range dayLog {
			s, _ := day.Rate.Calendar.Window(at)
			if perDay[s.Unix()]++; perDay[s.Unix()] > 3*q {
				t.Fatalf("seed %d: more than %d admitted on %v", seed, 3*q, s)
			}
		}
	}
}
