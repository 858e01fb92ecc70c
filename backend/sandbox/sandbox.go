// Package sandbox is the simulated provider that works sandbox orders. What
// happens to an order is chosen by the last four characters of the driver's
// license number, the way card networks publish test card numbers (the
// values and the published table are shared/sandboxvalues):
//
//	anything else  every service completes; driver_reviews finds two reviews
//	0001           mvr fails no_record; other services complete
//	0002           mvr held identity_review (the whole order under_review)
//	0003           mvr held manual_review until staff release it
//	0004           psp held report_review until staff release it
//	0005           every service fails provider_failed
//	0006           report services answer report_unavailable for one step, then complete
//	0007           nothing ever finishes: the deadline closes the order
//	0008           driver_reviews completes with found: false and no reviews
//
// The package decides outcomes only; the orders package applies them.
package sandbox

import (
	"strings"

	"vendorgate/shared/sandboxvalues"
	"vendorgate/shared/wire"
)

// Kind is what one step does to one service.
type Kind int

// The kinds of step outcome.
const (
	// Complete finishes the service; Reviews holds driver_reviews' result.
	Complete Kind = iota
	// Fail finishes the service as failed with Reason.
	Fail
	// Hold puts the service under_review with Reason until staff release it.
	Hold
	// Unavailable keeps the service processing with Reason
	// report_unavailable; the next step decides again.
	Unavailable
)

// Outcome is one step's result for one service.
type Outcome struct {
	Kind    Kind
	Reason  string
	Reviews *wire.ReviewsResult
}

// Label names the outcome for metrics.
func (o Outcome) Label() string {
	switch o.Kind {
	case Fail:
		return wire.StatusFailed
	case Hold:
		return wire.StatusUnderReview
	case Unavailable:
		return wire.ReasonReportUnavailable
	}
	return wire.StatusCompleted
}

// Test values: the last four characters of a license number. They live in
// shared/sandboxvalues, which the gateway's /docs page prints.
const (
	NoRecord          = sandboxvalues.NoRecord
	IdentityReview    = sandboxvalues.IdentityReview
	ManualReview      = sandboxvalues.ManualReview
	ReportReview      = sandboxvalues.ReportReview
	ProviderFailed    = sandboxvalues.ProviderFailed
	ReportUnavailable = sandboxvalues.ReportUnavailable
	NeverFinishes     = sandboxvalues.NeverFinishes
	NoReviews         = sandboxvalues.NoReviews
)

func suffix(license string) string {
	if len(license) < 4 {
		return license
	}
	return strings.ToUpper(license[len(license)-4:])
}

// Stalls reports whether the provider never works orders for this license
// (test value 0007): they stay processing until the deadline closes them.
func Stalls(license string) bool { return suffix(license) == NeverFinishes }

// Step returns what step number step (1 for the first) does to service for
// a driver with license.
func Step(license, service string, step int) Outcome {
	s := suffix(license)
	if s == ProviderFailed {
		return Outcome{Kind: Fail, Reason: wire.ReasonProviderFailed}
	}
	switch service {
	case wire.MVR:
		switch s {
		case NoRecord:
			return Outcome{Kind: Fail, Reason: wire.ReasonNoRecord}
		case IdentityReview:
			return Outcome{Kind: Hold, Reason: wire.ReasonIdentityReview}
		case ManualReview:
			return Outcome{Kind: Hold, Reason: wire.ReasonManualReview}
		}
	case wire.PSP:
		if s == ReportReview {
			return Outcome{Kind: Hold, Reason: wire.ReasonReportReview}
		}
	case wire.DriverReviews:
		if s == NoReviews {
			return Outcome{Kind: Complete, Reviews: NoReviewsResult()}
		}
		return Outcome{Kind: Complete, Reviews: TwoReviews()}
	}
	if s == ReportUnavailable && wire.HasReport(service) && step == 1 {
		return Outcome{Kind: Unavailable, Reason: wire.ReasonReportUnavailable}
	}
	return Outcome{Kind: Complete}
}

// TwoReviews is driver_reviews' sandbox result when reviews are found.
func TwoReviews() *wire.ReviewsResult {
	r1, r2 := 4.5, 3.0
	t1, t2 := "Reliable and on time; careful with the load.", "Late twice in one month, otherwise fine."
	d1, d2 := "2025-06-14", "2024-11-02"
	return &wire.ReviewsResult{Found: true, Reviews: []wire.Review{
		{Rating: &r1, Text: &t1, Date: &d1},
		{Rating: &r2, Text: &t2, Date: &d2},
	}}
}

// NoReviewsResult is driver_reviews' result when no review is found.
func NoReviewsResult() *wire.ReviewsResult {
	return &wire.ReviewsResult{Found: false, Reviews: []wire.Review{}}
}
