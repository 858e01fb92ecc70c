package sandbox

import (
	"fmt"
	"testing"

	"vendorgate/shared/sandboxvalues"
	"vendorgate/shared/wire"
)

func TestStepOutcomesByLicenseSuffix(t *testing.T) {
	cases := []struct {
		license, service string
		step             int
		kind             Kind
		reason           string
	}{
		{"D1234567", wire.MVR, 1, Complete, ""},
		{"D1234567", wire.CDLIS, 1, Complete, ""},
		{"D0001", wire.MVR, 1, Fail, wire.ReasonNoRecord},
		{"D0001", wire.PSP, 1, Complete, ""},
		{"D0002", wire.MVR, 1, Hold, wire.ReasonIdentityReview},
		{"D0002", wire.PSP, 1, Complete, ""},
		{"D0003", wire.MVR, 1, Hold, wire.ReasonManualReview},
		{"D0004", wire.PSP, 1, Hold, wire.ReasonReportReview},
		{"D0004", wire.MVR, 1, Complete, ""},
		{"D0005", wire.MVR, 1, Fail, wire.ReasonProviderFailed},
		{"D0005", wire.DriverReviews, 1, Fail, wire.ReasonProviderFailed},
		{"D0006", wire.MVR, 1, Unavailable, wire.ReasonReportUnavailable},
		{"D0006", wire.CDLIS, 1, Unavailable, wire.ReasonReportUnavailable},
		{"D0006", wire.CDLIS, 2, Complete, ""},
		{"D0006", wire.DriverReviews, 1, Complete, ""},
	}
	for _, c := range cases {
		t.Run(c.license+"/"+c.service, func(t *testing.T) {
			out := Step(c.license, c.service, c.step)
			if out.Kind != c.kind || out.Reason != c.reason {
				t.Fatalf("Step(%s, %s, %d) = %+v; want kind %d reason %q", c.license, c.service, c.step, out, c.kind, c.reason)
			}
		})
	}
}

func TestDriverReviewsResults(t *testing.T) {
	if r := Step("D1234567", wire.DriverReviews, 1).Reviews; r == nil || !r.Found || len(r.Reviews) != 2 {
		t.Fatalf("default driver_reviews = %+v; want two reviews", r)
	}
	if r := Step("D0008", wire.DriverReviews, 1).Reviews; r == nil || r.Found || r.Reviews == nil || len(r.Reviews) != 0 {
		t.Fatalf("0008 driver_reviews = %+v; want found false and an empty list", r)
	}
	if !Stalls("X0007") || Stalls("X0006") {
		t.Fatal("Stalls is wrong")
	}
}

// TestPublishedValuesAreTheSimulatorsOwn: every license suffix the docs
// publish makes the simulator do something other than its default, and
// every suffix the simulator reacts to is published.
func TestPublishedValuesAreTheSimulatorsOwn(t *testing.T) {
	services := []string{wire.MVR, wire.PSP, wire.CDLIS, wire.DriverReviews}
	special := func(suffix string) bool {
		if Stalls("D" + suffix) {
			return true
		}
		for _, svc := range services {
			for step := 1; step <= 2; step++ {
				got, def := Step("D"+suffix, svc, step), Step("D9999", svc, step)
				if got.Kind != def.Kind || got.Reason != def.Reason || (got.Reviews == nil) != (def.Reviews == nil) ||
					got.Reviews != nil && got.Reviews.Found != def.Reviews.Found {
					return true
				}
			}
		}
		return false
	}
	published := map[string]bool{}
	for _, v := range sandboxvalues.Table() {
		if v.Field != "driver.license_number" || v.Value == "" {
			continue
		}
		published[v.Value] = true
		if !special(v.Value) {
			t.Errorf("published test value %s does nothing special in the simulator", v.Value)
		}
	}
	for i := 0; i < 10000; i++ {
		s := fmt.Sprintf("%04d", i)
		if special(s) && !published[s] {
			t.Errorf("the simulator reacts to %s, which the published table lacks", s)
		}
	}
}
