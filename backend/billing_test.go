package backend

import (
	"context"
	"fmt"
	"testing"
	"time"

	"vendorgate/backend/billing"
	"vendorgate/backend/store"
	"vendorgate/backend/store/postgres"
	"vendorgate/shared/testpg"
	"vendorgate/shared/wire"
)

// flush posts a gateway usage flush as a gateway does.
func (h *harness) flush(body string) resp {
	h.t.Helper()
	return h.do("POST", h.api+wire.UsageFlushPath, map[string]string{wire.HeaderInternalToken: testInternalToken,
		"Content-Type": "application/json"}, body)
}

// settle steps the sandbox until every order is final or held.
func (h *harness) settle(vendorID string, ids ...string) []wire.Order {
	h.t.Helper()
	var out []wire.Order
	for range 20 {
		h.clock.Advance(testDelay)
		h.runSandbox()
		out = out[:0]
		done := true
		for _, id := range ids {
			o := h.get(vendorID, id)
			out = append(out, o)
			for _, s := range o.Services {
				done = done && s.Status != wire.StatusProcessing
			}
		}
		if done {
			return out
		}
	}
	h.t.Fatalf("orders never settled: %+v", out)
	return nil
}

// TestUsageMonthReport: the month report counts, per environment and
// service, exactly what the vendor's orders say (ordered, completed,
// failed, no_record, held, billable), and the gateway requests of the
// flushes posted for the month, each flush id once.
func TestUsageMonthReport(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { usageMonthReport(t, start(t)) })
	t.Run("postgres", func(t *testing.T) {
		url := testpg.Start(t).CreateDB(t, "month")
		usageMonthReport(t, start(t, func(o *Options) { o.Store = openPostgres(t, url) }))
	})
}

// openPostgres opens the PostgreSQL store at url for a backend to own.
func openPostgres(t *testing.T, url string) store.Store {
	t.Helper()
	st, err := postgres.Open(context.Background(), postgres.Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func usageMonthReport(t *testing.T, h *harness) {
	v := h.newVendor("sandbox", "mvr", "psp")
	other := h.newVendor("sandbox", "mvr")
	var ids []string
	for _, lic := range []string{"D1230000", "D1230001", "D1230004", "D1230005"} {
		ids = append(ids, h.mustPlace(v, lic, "mvr", "psp").OrderID)
	}
	otherOrder := h.mustPlace(other, "D9990000", "mvr").OrderID
	orders := h.settle(v, ids...)
	h.settle(other, otherOrder)

	// What the orders say, service by service.
	want := map[string]*billing.ServiceMonth{}
	for _, o := range orders {
		for _, s := range o.Services {
			m := want[s.Service]
			if m == nil {
				m = &billing.ServiceMonth{Environment: "sandbox", Service: s.Service}
				want[s.Service] = m
			}
			m.Ordered++
			switch s.Status {
			case wire.StatusCompleted:
				m.Completed++
				m.Billable++
			case wire.StatusFailed:
				m.Failed++
				if deref(s.Reason) == wire.ReasonNoRecord {
					m.NoRecord++
					m.Billable++
				}
			case wire.StatusUnderReview:
				m.Held++
			}
		}
	}
	if want["mvr"].NoRecord != 1 || want["psp"].Held != 1 || want["mvr"].Billable+want["psp"].Billable != 5 {
		t.Fatalf("the sandbox did not do what its table says: %+v %+v", *want["mvr"], *want["psp"])
	}

	month := billing.MonthOf(h.clock.Now())
	minute := h.clock.Now().Unix() / 60
	f1 := fmt.Sprintf(`{"id":"gw-a-1","minute":%d,"rows":[{"vendor_id":%q,"policy":"standard","allowed":7,"limited":2,"shadow_limited":1}]}`, minute, v)
	for i, applied := range []bool{true, false} {
		var got struct {
			Applied bool `json:"applied"`
		}
		h.decode(h.flush(f1), 200, &got)
		if got.Applied != applied {
			t.Errorf("flush %d: applied %v, want %v", i+1, got.Applied, applied)
		}
	}
	h.decode(h.flush(fmt.Sprintf(`{"id":"gw-b-1","minute":%d,"rows":[{"vendor_id":%q,"policy":"standard","allowed":3,"limited":1,"shadow_limited":0}]}`, minute, v)), 200, &struct{}{})
	// A flush of the month before is not this month's.
	prev := month.From.Add(-time.Minute).Unix() / 60
	h.decode(h.flush(fmt.Sprintf(`{"id":"gw-a-0","minute":%d,"rows":[{"vendor_id":%q,"policy":"standard","allowed":1000,"limited":0,"shadow_limited":0}]}`, prev, v)), 200, &struct{}{})

	var r billing.MonthReport
	h.decode(h.adminCall("GET", "/admin/v1/usage/month?month="+month.String()+"&vendor_id="+v, ""), 200, &r)
	if r.Month != month.String() || len(r.Vendors) != 1 || r.Vendors[0].VendorID != v || r.Vendors[0].CompanyName != "Acme sandbox" {
		t.Fatalf("report = %+v", r)
	}
	got := r.Vendors[0]
	if len(got.Services) != 2 || got.Services[0] != *want["mvr"] || got.Services[1] != *want["psp"] {
		t.Errorf("services = %+v, want %+v and %+v", got.Services, *want["mvr"], *want["psp"])
	}
	wantReq := billing.PolicyMonth{Policy: "standard", Requests: 13, Allowed: 10, Limited: 3, ShadowLimited: 1}
	if len(got.Requests) != 1 || got.Requests[0] != wantReq {
		t.Errorf("requests = %+v, want %+v", got.Requests, wantReq)
	}

	// Without a month: the current one; without a vendor: every vendor
	// that used anything.
	var all billing.MonthReport
	h.decode(h.adminCall("GET", "/admin/v1/usage/month", ""), 200, &all)
	if all.Month != month.String() || len(all.Vendors) != 2 {
		t.Fatalf("every vendor's month = %+v", all)
	}
	for _, vm := range all.Vendors {
		if vm.VendorID == other && (len(vm.Services) != 1 || vm.Services[0].Billable != 1 || len(vm.Requests) != 0) {
			t.Errorf("other vendor's month = %+v", vm)
		}
	}
	var next billing.MonthReport
	h.decode(h.adminCall("GET", "/admin/v1/usage/month?month="+month.From.AddDate(0, 1, 0).Format("2006-01"), ""), 200, &next)
	if len(next.Vendors) != 0 {
		t.Errorf("next month = %+v, want nothing", next)
	}
}

// TestUsageMonthBadInput: a month that is not one, an unknown parameter,
// an unknown vendor, and flushes that are not flushes get the error
// envelope; a flush without the internal token is refused.
func TestUsageMonthBadInput(t *testing.T) {
	h := start(t)
	for _, tc := range []struct {
		query, code, field string
		status             int
	}{
		{"month=2026-13", "validation_error", "month", 400},
		{"month=2026-1", "validation_error", "month", 400},
		{"month=november", "validation_error", "month", 400},
		{"month=", "validation_error", "month", 400},
		{"vendor=x", "validation_error", "vendor", 400},
		{"vendor_id=7b0c4a5e-0f3b-4b8e-9a39-2f1f1e0d9c11", "not_found", "", 404},
	} {
		r := h.adminCall("GET", "/admin/v1/usage/month?"+tc.query, "")
		code, fields, _ := r.envelope(t)
		if r.status != tc.status || code != tc.code || (tc.field != "" && fields[tc.field] == "") {
			t.Errorf("%s: %d %s %v, want %d %s naming %q", tc.query, r.status, code, fields, tc.status, tc.code, tc.field)
		}
	}
	for _, tc := range []struct{ body, field string }{
		{`{"id":"","minute":1,"rows":[]}`, "id"},
		{`{"id":"x","minute":0,"rows":[]}`, "minute"},
		{`{"id":"x","minute":1,"rows":[{"vendor_id":"","policy":"p"}]}`, "rows"},
		{`{"id":"x","minute":1,"rows":[{"vendor_id":"v","policy":"p","allowed":-1}]}`, ""},
		{`not json`, ""},
	} {
		r := h.flush(tc.body)
		code, fields, _ := r.envelope(t)
		if r.status != 400 || code != "validation_error" || (tc.field != "" && fields[tc.field] == "") {
			t.Errorf("flush %s: %d %s %v, want 400 validation_error naming %q", tc.body, r.status, code, fields, tc.field)
		}
	}
	r := h.do("POST", h.api+wire.UsageFlushPath, map[string]string{"Content-Type": "application/json"}, `{"id":"x","minute":1,"rows":[]}`)
	if code, _, _ := r.envelope(t); r.status != 401 || code != "invalid_api_key" {
		t.Errorf("flush without the internal token: %d %s", r.status, code)
	}
}
