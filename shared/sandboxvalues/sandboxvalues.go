// Package sandboxvalues is the one list of the sandbox's test values, as
// card networks publish test card numbers: the backend's simulated provider
// decides outcomes by these values and the gateway's /docs page prints this
// table, so what vendors read is what the simulator does.
package sandboxvalues

// License-number suffixes: the last four characters of the driver's
// license_number choose what the simulated provider does.
const (
	NoRecord          = "0001"
	IdentityReview    = "0002"
	ManualReview      = "0003"
	ReportReview      = "0004"
	ProviderFailed    = "0005"
	ReportUnavailable = "0006"
	NeverFinishes     = "0007"
	NoReviews         = "0008"
)

// PriceUnavailableMC is the normalised mc_number whose placement answers
// 503 price_unavailable, in every environment.
const PriceUnavailableMC = "MC99999999"

// Value is one row of the published table.
type Value struct {
	// Field is the request field the value goes in.
	Field string
	// Match says how the field must read, for example "ends in 0001".
	Match string
	// Value is the test value itself ("" for the default row).
	Value string
	// Outcome is what the vendor sees.
	Outcome string
}

// Table is the published table, in order; the first row is the default.
func Table() []Value {
	const lic = "driver.license_number"
	return []Value{
		{Field: lic, Match: "ends in anything else", Outcome: "every service completes; driver_reviews finds two reviews"},
		{Field: lic, Match: "ends in", Value: NoRecord, Outcome: "mvr fails with reason no_record; the other services complete (order partially_completed)"},
		{Field: lic, Match: "ends in", Value: IdentityReview, Outcome: "mvr held under_review with reason identity_review: the whole order is under_review until staff release it"},
		{Field: lic, Match: "ends in", Value: ManualReview, Outcome: "mvr held under_review with reason manual_review until staff release it"},
		{Field: lic, Match: "ends in", Value: ReportReview, Outcome: "psp held under_review with reason report_review until staff release it"},
		{Field: lic, Match: "ends in", Value: ProviderFailed, Outcome: "every service fails with reason provider_failed (order failed)"},
		{Field: lic, Match: "ends in", Value: ReportUnavailable, Outcome: "each report service (mvr, psp, cdlis) stays processing with reason report_unavailable for one more step, then completes"},
		{Field: lic, Match: "ends in", Value: NeverFinishes, Outcome: "nothing ever finishes: the deadline closes the order, services fail with reason timed_out"},
		{Field: lic, Match: "ends in", Value: NoReviews, Outcome: "driver_reviews completes with found: false and no reviews"},
		{Field: "mc_number", Match: "normalises to", Value: PriceUnavailableMC, Outcome: "placement answers 503 price_unavailable"},
	}
}
