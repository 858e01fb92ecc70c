// Package billing is what a vendor used in a month, for its bill: the
// services of its orders (exact: counted from the orders), the gateways'
// requests and refusals by limit (daily totals the gateways' usage flushes
// feed, Ingest), and the optional export of every billable service as a
// CloudEvent to an OpenMeter-compatible endpoint (Exporter).
package billing

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"vendorgate/backend/store"
	"vendorgate/shared/apierr"
	"vendorgate/shared/wire"
)

// Store is what billing needs of the backend's store.
type Store interface {
	GetVendor(ctx context.Context, id string) (*store.Vendor, error)
	ListVendors(ctx context.Context) ([]*store.Vendor, error)
	ServiceUsage(ctx context.Context, vendorID string, from, to time.Time) ([]store.ServiceUsage, error)
	ApplyUsageFlush(ctx context.Context, f store.UsageFlush) (applied bool, err error)
	GatewayUsage(ctx context.Context, vendorID, fromDay, toDay string) ([]store.GatewayUsage, error)
}

// Month is a calendar month in UTC.
type Month struct {
	From time.Time // its first instant
}

// ParseMonth reads YYYY-MM.
func ParseMonth(s string) (Month, error) {
	t, err := time.Parse("2006-01", s)
	if err != nil || len(s) != 7 || t.Year() < 2000 {
		return Month{}, fmt.Errorf("%q is not a month: write it YYYY-MM, such as 2026-11", s)
	}
	return Month{From: t.UTC()}, nil
}

// MonthOf is the month t falls in, in UTC.
func MonthOf(t time.Time) Month {
	t = t.UTC()
	return Month{From: time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)}
}

// To is the first instant of the next month.
func (m Month) To() time.Time { return m.From.AddDate(0, 1, 0) }

func (m Month) String() string { return m.From.Format("2006-01") }

// MonthReport is a month's usage of one vendor or of every vendor that
// used anything in it.
type MonthReport struct {
	Month   string        `json:"month"`
	From    time.Time     `json:"from"`
	To      time.Time     `json:"to"`
	Vendors []VendorMonth `json:"vendors"`
}

// VendorMonth is one vendor's month.
type VendorMonth struct {
	VendorID    string `json:"vendor_id"`
	CompanyName string `json:"company_name"`
	// Services are the services of the orders placed in the month, by
	// environment and service.
	Services []ServiceMonth `json:"services"`
	// Requests are the gateways' requests by limit policy.
	Requests []PolicyMonth `json:"requests"`
}

// ServiceMonth is one service of one environment: the orders placed in the
// month that include it, and where those services stand now.
type ServiceMonth struct {
	Environment string `json:"environment"`
	Service     string `json:"service"`
	Ordered     int64  `json:"ordered"`
	Completed   int64  `json:"completed"`
	Failed      int64  `json:"failed"`
	// NoRecord are the failed ones whose reason is no_record (NO_HIT).
	NoRecord int64 `json:"no_record"`
	Held     int64 `json:"held"`
	// Billable is Completed + NoRecord.
	Billable int64 `json:"billable"`
}

// PolicyMonth is one limit policy's requests: Requests = Allowed + Limited
// (the refusals of an enforced limit); ShadowLimited are allowed requests
// a shadow limit would have refused.
type PolicyMonth struct {
	Policy        string `json:"policy"`
	Requests      int64  `json:"requests"`
	Allowed       int64  `json:"allowed"`
	Limited       int64  `json:"limited"`
	ShadowLimited int64  `json:"shadow_limited"`
}

// Service builds month reports and takes the gateways' flushes.
type Service struct {
	st  Store
	now func() time.Time
}

// New returns the billing service.
func New(st Store, now func() time.Time) (*Service, error) {
	if st == nil || now == nil {
		return nil, errors.New("billing: store and clock required")
	}
	return &Service{st: st, now: now}, nil
}

// Month reports vendorID's month (every vendor's that used anything in it
// when vendorID is ""). An unknown vendor is the API's not_found.
func (s *Service) Month(ctx context.Context, vendorID string, m Month) (*MonthReport, error) {
	names := map[string]string{}
	if vendorID != "" {
		v, err := s.st.GetVendor(ctx, vendorID)
		if errors.Is(err, store.ErrNotFound) {
			return nil, apierr.New(apierr.NotFound, "vendor not found")
		}
		if err != nil {
			return nil, err
		}
		names[v.ID] = v.CompanyName
	} else {
		vs, err := s.st.ListVendors(ctx)
		if err != nil {
			return nil, err
		}
		for _, v := range vs {
			names[v.ID] = v.CompanyName
		}
	}
	su, err := s.st.ServiceUsage(ctx, vendorID, m.From, m.To())
	if err != nil {
		return nil, err
	}
	gu, err := s.st.GatewayUsage(ctx, vendorID, m.From.Format(time.DateOnly), m.To().Format(time.DateOnly))
	if err != nil {
		return nil, err
	}
	byVendor := map[string]*VendorMonth{}
	get := func(id string) *VendorMonth {
		v, ok := byVendor[id]
		if !ok {
			v = &VendorMonth{VendorID: id, CompanyName: names[id], Services: []ServiceMonth{}, Requests: []PolicyMonth{}}
			byVendor[id] = v
		}
		return v
	}
	if vendorID != "" {
		get(vendorID)
	}
	for _, u := range su {
		v := get(u.VendorID)
		v.Services = append(v.Services, ServiceMonth{Environment: u.Environment, Service: u.Service, Ordered: u.Ordered,
			Completed: u.Completed, Failed: u.Failed, NoRecord: u.NoRecord, Held: u.Held, Billable: u.Billable()})
	}
	for _, u := range gu {
		v := get(u.VendorID)
		v.Requests = append(v.Requests, PolicyMonth{Policy: u.Policy, Requests: u.Allowed + u.Limited, Allowed: u.Allowed,
			Limited: u.Limited, ShadowLimited: u.ShadowLimited})
	}
	r := &MonthReport{Month: m.String(), From: m.From, To: m.To(), Vendors: []VendorMonth{}}
	for _, v := range byVendor {
		r.Vendors = append(r.Vendors, *v)
	}
	sort.Slice(r.Vendors, func(i, j int) bool { return r.Vendors[i].VendorID < r.Vendors[j].VendorID })
	return r, nil
}

// Bounds of a flush's text, so that a flush is a flush and not a way to
// fill the database.
const (
	maxFlushID   = 200
	maxFlushText = 200
)

// Ingest adds a gateway's flush to the daily totals (once per flush id).
// A flush that is not one is a validation error naming its field.
func (s *Service) Ingest(ctx context.Context, f wire.UsageFlush) (applied bool, err error) {
	bad := func(field, why string) error {
		e := apierr.New(apierr.ValidationError, "the usage flush is not valid; see fields")
		e.Fields = map[string]string{field: why}
		return e
	}
	switch {
	case f.ID == "" || len(f.ID) > maxFlushID:
		return false, bad("id", fmt.Sprintf("1 to %d characters", maxFlushID))
	case f.Minute <= 0:
		return false, bad("minute", "a Unix minute")
	case len(f.Rows) > wire.MaxUsageFlushRows:
		return false, bad("rows", fmt.Sprintf("at most %d", wire.MaxUsageFlushRows))
	}
	rows := make([]store.GatewayUsage, 0, len(f.Rows))
	for _, r := range f.Rows {
		if r.VendorID == "" || len(r.VendorID) > maxFlushText || r.Policy == "" || len(r.Policy) > maxFlushText {
			return false, bad("rows", fmt.Sprintf("every row needs a vendor_id and a policy of 1 to %d characters", maxFlushText))
		}
		const maxCount = 1 << 53 // exact in a JSON number, and far from int64's end when summed
		if r.Allowed > maxCount || r.Limited > maxCount || r.ShadowLimited > maxCount {
			return false, bad("rows", "a count out of range")
		}
		rows = append(rows, store.GatewayUsage{VendorID: r.VendorID, Policy: r.Policy, Allowed: int64(r.Allowed),
			Limited: int64(r.Limited), ShadowLimited: int64(r.ShadowLimited)})
	}
	day := time.Unix(f.Minute*60, 0).UTC().Format(time.DateOnly)
	return s.st.ApplyUsageFlush(ctx, store.UsageFlush{ID: f.ID, Day: day, At: s.now(), Rows: rows})
}
