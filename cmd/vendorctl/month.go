package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"vendorgate/backend/billing"
	"vendorgate/cmd/vendorctl/internal/view"
)

// monthCSVHeader is the header of -o csv: one row per service of an
// environment (record "service") and one per limit policy (record
// "requests"); a cell that does not apply to the row's record is empty.
var monthCSVHeader = []string{"month", "vendor_id", "company_name", "record", "environment", "service",
	"ordered", "completed", "failed", "no_record", "held", "billable",
	"policy", "requests", "allowed", "limited", "shadow_limited"}

// usageMonth prints a vendor's month (or, with --all, every vendor's that
// used anything): its orders' services by environment and the gateways'
// requests by limit. The month is checked here, so that one that is not a
// month is a usage error before any call.
func usageMonth(e *env, inv *invocation) error {
	q := url.Values{"month": {e.now().UTC().Format("2006-01")}}
	if s, ok := inv.flags["month"]; ok {
		if t, err := time.Parse("2006-01", s); err != nil || len(s) != 7 || t.Year() < 2000 {
			return usagef(inv.cmd, "--month %q is not a month: write it YYYY-MM, such as 2026-11", s)
		}
		q.Set("month", s)
	}
	if _, all := inv.flags["all"]; !all {
		id, err := uuidArg(inv, 0)
		if err != nil {
			return err
		}
		q.Set("vendor_id", id)
	}
	raw, err := e.api.Do(e.ctx, http.MethodGet, "/admin/v1/usage/month?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	if e.format == formatJSON {
		return view.JSON(e.out, raw)
	}
	var r billing.MonthReport
	if err := json.Unmarshal(raw, &r); err != nil {
		return fmt.Errorf("read the backend's answer: %w", err)
	}
	if e.format == formatCSV {
		return writeMonthCSV(e, r)
	}
	t := view.NewTable(e.out)
	if len(r.Vendors) == 0 {
		t.Note("No vendor placed an order or sent a request in " + r.Month + ".")
		return t.Flush()
	}
	n := strconv.FormatInt
	t.Row("MONTH", "VENDOR ID", "COMPANY", "ENVIRONMENT", "SERVICE", "ORDERED", "COMPLETED", "FAILED", "NO_RECORD", "HELD", "BILLABLE")
	for _, v := range r.Vendors {
		for _, s := range v.Services {
			t.Row(r.Month, v.VendorID, v.CompanyName, s.Environment, s.Service, n(s.Ordered, 10), n(s.Completed, 10), n(s.Failed, 10),
				n(s.NoRecord, 10), n(s.Held, 10), n(s.Billable, 10))
		}
	}
	if err := t.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(e.out)
	t = view.NewTable(e.out)
	t.Row("MONTH", "VENDOR ID", "COMPANY", "POLICY", "REQUESTS", "ALLOWED", "LIMITED", "SHADOW LIMITED")
	for _, v := range r.Vendors {
		for _, p := range v.Requests {
			t.Row(r.Month, v.VendorID, v.CompanyName, p.Policy, n(p.Requests, 10), n(p.Allowed, 10), n(p.Limited, 10), n(p.ShadowLimited, 10))
		}
	}
	return t.Flush()
}

func writeMonthCSV(e *env, r billing.MonthReport) error {
	w := csv.NewWriter(e.out)
	n := func(v int64) string { return strconv.FormatInt(v, 10) }
	_ = w.Write(monthCSVHeader)
	for _, v := range r.Vendors {
		for _, s := range v.Services {
			_ = w.Write([]string{r.Month, v.VendorID, v.CompanyName, "service", s.Environment, s.Service,
				n(s.Ordered), n(s.Completed), n(s.Failed), n(s.NoRecord), n(s.Held), n(s.Billable), "", "", "", "", ""})
		}
		for _, p := range v.Requests {
			_ = w.Write([]string{r.Month, v.VendorID, v.CompanyName, "requests", "", "", "", "", "", "", "", "",
				p.Policy, n(p.Requests), n(p.Allowed), n(p.Limited), n(p.ShadowLimited)})
		}
	}
	w.Flush()
	return w.Error()
}
