package main

import (
	"encoding/csv"
	"strings"
	"testing"
	"time"

	"vendorgate/backend/billing"
	"vendorgate/shared/wire"
)

// TestUsageMonthAgainstBackend: `usage month` prints, as csv, json and a
// table, a vendor's orders by service with their billable count; a month
// that is not one is exit 2 with the reason and the usage line; an unknown
// vendor is exit 1 with the API's not_found.
func TestUsageMonthAgainstBackend(t *testing.T) {
	h := startBackend(t)
	v := decodeInto[struct {
		VendorID string `json:"vendor_id"`
	}](t, h.ctl("-o", "json", "vendor", "create", "--company", "Month Co", "--environment", "sandbox", "--services", "mvr,psp")).VendorID
	h.ctl("vendor", "approve", v)
	// 0001: mvr fails no_record (billable), psp completes.
	id := h.placeOrder(v, "D1230001", "mvr", "psp")
	h.waitFor(id, "final", func(o wire.Order) bool { return o.Final })
	month := time.Now().UTC().Format("2006-01")

	out := h.ctl("usage", "month", v, "-o", "csv")
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatalf("not csv: %v\n%s", err, out)
	}
	want := [][]string{monthCSVHeader,
		{month, v, "Month Co", "service", "sandbox", "mvr", "1", "0", "1", "1", "0", "1", "", "", "", "", ""},
		{month, v, "Month Co", "service", "sandbox", "psp", "1", "1", "0", "0", "0", "1", "", "", "", "", ""},
	}
	if strings.Join(flatten(rows), "|") != strings.Join(flatten(want), "|") {
		t.Errorf("csv =\n%q\nwant\n%q", rows, want)
	}
	j := decodeInto[billing.MonthReport](t, h.ctl("-o", "json", "usage", "month", "--all", "--month", month))
	if j.Month != month || len(j.Vendors) != 1 || len(j.Vendors[0].Services) != 2 || j.Vendors[0].Services[0].Billable != 1 {
		t.Errorf("json = %+v", j)
	}
	if line := lineWith(h.ctl("usage", "month", v), month); fields(line)[4] != "sandbox" {
		t.Errorf("table line %q", line)
	}
	if out := h.ctl("usage", "month", "--all", "--month", "2001-01"); !strings.Contains(out, "No vendor placed an order") {
		t.Errorf("an empty month: %q", out)
	}

	for _, args := range [][]string{
		{"usage", "month", v, "--month", "2026-13"},
		{"usage", "month", v, "--month", "nov"},
		{"usage", "month"},
		{"usage", "month", "--all", v},
		{"usage", "month", "--all=yes"},
		{"vendor", "list", "-o", "csv"},
	} {
		r := h.runCtl(h.env(), args...)
		checkFailure(t, r, 2, args)
		if !strings.Contains(r.stderr, "usage: vendorctl ") {
			t.Errorf("%q: no usage line in %q", args, r.stderr)
		}
	}
	if line := h.ctlFails(1, "usage", "month", "7b0c4a5e-0f3b-4b8e-9a39-2f1f1e0d9c11"); !strings.Contains(line, "not_found") {
		t.Errorf("unknown vendor: %q", line)
	}
}

func flatten(rows [][]string) []string {
	var out []string
	for _, r := range rows {
		out = append(out, strings.Join(r, ","))
	}
	return out
}
