package backend

import (
	"net/url"
	"reflect"
	"testing"
	"time"

	"vendorgate/backend/orders"
	"vendorgate/shared/sandboxvalues"
	"vendorgate/shared/wire"
)

// queue calls GET /admin/v1/orders with q and decodes the page.
func (h *harness) queue(q url.Values) orders.QueuePage {
	h.t.Helper()
	var p orders.QueuePage
	h.decode(h.adminCall("GET", "/admin/v1/orders?"+q.Encode(), ""), 200, &p)
	return p
}

func pageIDs(p orders.QueuePage) []string {
	out := []string{}
	for _, e := range p.Orders {
		out = append(out, e.Order.OrderID)
	}
	return out
}

// TestAdminOrderQueue: the staff find held orders across vendors by status,
// hold reason, vendor and placement time, newest first and paged, each
// with its vendor and its deadline; a bad filter is a 400 naming it.
func TestAdminOrderQueue(t *testing.T) {
	h := start(t)
	a, b := h.newVendor("sandbox", allServices...), h.newVendor("sandbox", allServices...)
	held := func(vendorID, suffix, reason string) string {
		o := h.mustPlace(vendorID, "D123"+suffix, wire.MVR, wire.PSP)
		h.clock.Advance(time.Millisecond) // one placement time each: newest first is unambiguous
		return o.OrderID
	}
	identity := held(a, sandboxvalues.IdentityReview, wire.ReasonIdentityReview)
	manual := held(b, sandboxvalues.ManualReview, wire.ReasonManualReview)
	report := held(a, sandboxvalues.ReportReview, wire.ReasonReportReview)
	plain := held(b, "9999", "")
	h.clock.Advance(testDelay)
	for _, id := range []string{identity, manual, report} {
		vendor := a
		if id == manual {
			vendor = b
		}
		h.eventually(vendor, id, func(o wire.Order) bool { return o.Status == wire.StatusUnderReview })
	}
	h.eventually(b, plain, func(o wire.Order) bool { return o.Final })

	cases := []struct {
		q    url.Values
		want []string
	}{
		{url.Values{}, []string{plain, report, manual, identity}},
		{url.Values{"status": {"under_review"}}, []string{report, manual, identity}},
		{url.Values{"reason": {"identity_review"}}, []string{identity}},
		{url.Values{"reason": {"manual_review"}}, []string{manual}},
		{url.Values{"reason": {"report_review"}}, []string{report}},
		{url.Values{"status": {"under_review"}, "vendor_id": {a}}, []string{report, identity}},
		{url.Values{"status": {"completed"}}, []string{plain}},
		{url.Values{"since": {h.clock.Now().Add(time.Minute).Format(time.RFC3339)}}, []string{}},
	}
	for _, tc := range cases {
		if got := pageIDs(h.queue(tc.q)); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("?%s: got %v, want %v", tc.q.Encode(), got, tc.want)
		}
	}

	// Each entry: the order's vendor, its deadline (placement + 48h), the
	// order as the vendor sees it with the held service's reason.
	p := h.queue(url.Values{"reason": {"report_review"}})
	e := p.Orders[0]
	if e.VendorID != a || !e.DeadlineAt.Equal(e.Order.CreatedAt.Add(48*time.Hour)) {
		t.Errorf("entry: vendor %s (want %s), deadline %v for an order placed %v", e.VendorID, a, e.DeadlineAt, e.Order.CreatedAt)
	}
	if s := service(e.Order, wire.PSP); s.Status != wire.StatusUnderReview || deref(s.Reason) != wire.ReasonReportReview {
		t.Errorf("held psp: %+v", s)
	}

	// Paging: one a page walks the queue in order and ends.
	var walked []string
	q := url.Values{"status": {"under_review"}, "limit": {"1"}}
	for i := 0; i < 5; i++ {
		p := h.queue(q)
		walked = append(walked, pageIDs(p)...)
		if p.NextCursor == nil {
			break
		}
		q.Set("cursor", *p.NextCursor)
	}
	if want := []string{report, manual, identity}; !reflect.DeepEqual(walked, want) {
		t.Errorf("paged: %v, want %v", walked, want)
	}

	for field, value := range map[string]string{"status": "held", "reason": "report_unavailable", "vendor_id": "1234",
		"since": "24h", "limit": "0", "cursor": "nope", "statuss": "under_review"} {
		r := h.adminCall("GET", "/admin/v1/orders?"+url.Values{field: {value}}.Encode(), "")
		code, fields, _ := r.envelope(t)
		if r.status != 400 || code != "validation_error" || fields[field] == "" {
			t.Errorf("?%s=%s: %d %s fields %v, want 400 validation_error naming %s", field, value, r.status, code, fields, field)
		}
	}
}
