// Package wire holds the JSON types of the vendor API and the contracts
// between the gateway and the backend: the internal header names, the key
// resolution answer, and the invalidation messages. docs/CONTRACTS.md
// describes the whole contract, admin API and metric names included.
package wire

import "time"

// Service names.
const (
	MVR           = "mvr"
	PSP           = "psp"
	CDLIS         = "cdlis"
	DriverReviews = "driver_reviews"
)

// Services lists every service in the specification's order.
func Services() []string { return []string{MVR, PSP, CDLIS, DriverReviews} }

// IsService reports whether s names a service.
func IsService(s string) bool {
	switch s {
	case MVR, PSP, CDLIS, DriverReviews:
		return true
	}
	return false
}

// HasReport reports whether service s delivers a PDF report.
func HasReport(s string) bool { return s == MVR || s == PSP || s == CDLIS }

// Vendor account statuses. Only approved vendors are served; a suspended
// vendor may read but not order.
const (
	VendorPending   = "pending"
	VendorApproved  = "approved"
	VendorSuspended = "suspended"
)

// Order and service statuses.
const (
	StatusProcessing         = "processing"
	StatusUnderReview        = "under_review"
	StatusCompleted          = "completed"
	StatusPartiallyCompleted = "partially_completed"
	StatusFailed             = "failed"
)

// Known reason values.
const (
	ReasonReportUnavailable  = "report_unavailable"
	ReasonIdentityReview     = "identity_review"
	ReasonManualReview       = "manual_review"
	ReasonReportReview       = "report_review"
	ReasonProviderFailed     = "provider_failed"
	ReasonNoRecord           = "no_record"
	ReasonNoReport           = "no_report"
	ReasonTimedOut           = "timed_out"
	ReasonIdentityUnverified = "identity_unverified"
	ReasonRecordDeleted      = "record_deleted"
)

// Vendor is the answer of GET /api/vendor/v1/me.
type Vendor struct {
	VendorID        string   `json:"vendor_id"`
	CompanyName     string   `json:"company_name"`
	Environment     string   `json:"environment"`
	EnabledServices []string `json:"enabled_services"`
}

// Order is the order object: every field present, nulls where the
// specification says so.
type Order struct {
	OrderID           string         `json:"order_id"`
	Status            string         `json:"status"`
	Final             bool           `json:"final"`
	SafetyScore       *SafetyScore   `json:"safety_score"`
	Environment       string         `json:"environment"`
	MCNumber          string         `json:"mc_number"`
	ExternalReference *string        `json:"external_reference"`
	Services          []ServiceEntry `json:"services"`
	CreatedAt         time.Time      `json:"created_at"`
	Poll              Poll           `json:"poll"`
}

// Poll tells a client where and when to ask again.
type Poll struct {
	URL          string `json:"url"`
	AfterSeconds int    `json:"after_seconds"`
}

// SafetyScore is calculated from the MVR and PSP reports.
type SafetyScore struct {
	Score        int        `json:"score"`
	Grade        *string    `json:"grade"`
	RiskLevel    *string    `json:"risk_level"`
	ReportsUsed  []string   `json:"reports_used"`
	CalculatedAt *time.Time `json:"calculated_at"`
}

// ServiceEntry is one ordered service inside an order.
type ServiceEntry struct {
	Service     string         `json:"service"`
	Status      string         `json:"status"`
	Reason      *string        `json:"reason"`
	State       *string        `json:"state"`
	CompletedAt *time.Time     `json:"completed_at"`
	FileURL     *string        `json:"file_url"`
	Result      *ReviewsResult `json:"result"`
}

// ReviewsResult is the inline result of driver_reviews.
type ReviewsResult struct {
	Found   bool     `json:"found"`
	Reviews []Review `json:"reviews"`
}

// Review is one review of a driver. Date is YYYY-MM-DD.
type Review struct {
	Rating *float64 `json:"rating"`
	Text   *string  `json:"text"`
	Date   *string  `json:"date"`
}

// OrderRequest is the body of POST /api/vendor/v1/orders.
type OrderRequest struct {
	MCNumber          string   `json:"mc_number"`
	ExternalReference *string  `json:"external_reference"`
	Driver            Driver   `json:"driver"`
	Services          []string `json:"services"`
}

// Driver is the person an order checks.
type Driver struct {
	FirstName     string `json:"first_name"`
	LastName      string `json:"last_name"`
	DateOfBirth   string `json:"date_of_birth"`
	LicenseNumber string `json:"license_number"`
	LicenseState  string `json:"license_state"`
}

// OrderList is the answer of GET /api/vendor/v1/orders.
type OrderList struct {
	Orders     []Order `json:"orders"`
	NextCursor *string `json:"next_cursor"`
}
