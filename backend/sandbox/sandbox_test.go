package sandbox

import (
	"testing"

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
