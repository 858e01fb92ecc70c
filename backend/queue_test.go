package backend

import (
	"context"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"vendorgate/backend/orders"
	"vendorgate/backend/store/postgres"
	"vendorgate/shared/sandboxvalues"
	"vendorgate/shared/testpg"
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

// TestAdminOrderQueueFilterEdges: the queue's filters at their edges, on
// SQLite and on PostgreSQL alike: a since past 2262 lists nothing and one
// before 1678 everything; a vendor id in upper case is the same vendor (a
// UUID's hex digits are case-insensitive); a limit with a sign is no whole
// number; a token followed by a space is not the admin token.
func TestAdminOrderQueueFilterEdges(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { queueFilterEdges(t, start(t)) })
	t.Run("postgres", func(t *testing.T) {
		srv := testpg.Start(t)
		url := srv.CreateDB(t, "queue")
		h := start(t, func(o *Options) {
			st, err := postgres.Open(context.Background(), postgres.Options{URL: url})
			if err != nil {
				t.Fatal(err)
			}
			o.Store = st
		})
		queueFilterEdges(t, h)
	})
}

func queueFilterEdges(t *testing.T, h *harness) {
	a, b := h.newVendor("sandbox", allServices...), h.newVendor("sandbox", allServices...)
	first := h.mustPlace(a, "D1239999", wire.MVR).OrderID
	h.clock.Advance(time.Millisecond)
	second := h.mustPlace(b, "D1239998", wire.MVR).OrderID

	cases := []struct {
		q    url.Values
		want []string
	}{
		{url.Values{"since": {"9999-12-31T00:00:00Z"}}, []string{}},
		{url.Values{"since": {"2263-01-01T00:00:00Z"}}, []string{}},
		{url.Values{"since": {"1600-01-01T00:00:00Z"}}, []string{second, first}},
		{url.Values{"since": {"0001-01-01T00:00:00Z"}}, []string{second, first}},
		{url.Values{"vendor_id": {strings.ToUpper(a)}}, []string{first}},
		{url.Values{"vendor_id": {strings.ToUpper(b[:8]) + b[8:]}}, []string{second}},
	}
	for _, tc := range cases {
		if got := pageIDs(h.queue(tc.q)); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("?%s: got %v, want %v", tc.q.Encode(), got, tc.want)
		}
	}

	for _, limit := range []string{"+5", "-0", " 5", "5 ", "0x5", "5.0", "1e2"} {
		r := h.adminCall("GET", "/admin/v1/orders?"+url.Values{"limit": {limit}}.Encode(), "")
		code, fields, _ := r.envelope(t)
		if r.status != 400 || code != "validation_error" || fields["limit"] == "" {
			t.Errorf("?limit=%q: %d %s fields %v, want 400 validation_error naming limit", limit, r.status, code, fields)
		}
	}

	// The token as sent, byte for byte: a client library trims the
	// header's value before sending it.
	addr := strings.TrimPrefix(h.admin, "http://")
	for name, auth := range map[string]string{
		"trailing space":  "Authorization: Bearer " + testAdminToken + " \r\n",
		"trailing tab":    "Authorization: Bearer " + testAdminToken + "\t\r\n",
		"two spaces":      "Authorization: Bearer  " + testAdminToken + "\r\n",
		"twice":           "Authorization: Bearer " + testAdminToken + "\r\nAuthorization: Bearer x\r\n",
		"twice, the same": "Authorization: Bearer " + testAdminToken + "\r\nAuthorization: Bearer " + testAdminToken + "\r\n",
	} {
		r := rawRequest(t, addr, "GET /admin/v1/orders HTTP/1.1\r\nHost: a\r\n"+auth+"Connection: close\r\n\r\n")
		if code := r.code(); r.status != 401 || code != "invalid_api_key" {
			t.Errorf("%s: %d %s, want 401 invalid_api_key", name, r.status, code)
		}
	}
	if r := rawRequest(t, addr, "GET /admin/v1/orders HTTP/1.1\r\nHost: a\r\nauthorization:Bearer "+testAdminToken+"\r\nConnection: close\r\n\r\n"); r.status != 200 {
		t.Errorf("the token exactly (lower-case name, no space after the colon): %d %s, want 200", r.status, r.body)
	}
}
