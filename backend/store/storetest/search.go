package storetest

import (
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"

	"vendorgate/backend/store"
	"vendorgate/shared/wire"
)

// held is o with service i held under_review for reason.
func held(o *store.Order, i int, reason string) *store.Order {
	o.Services[i].Status, o.Services[i].Reason = wire.StatusUnderReview, ptr(reason)
	o.Status = wire.StatusUnderReview
	return o
}

// searchAll walks every page of SearchOrders with f, limit orders a page.
func searchAll(t *testing.T, s store.Store, f store.OrderFilter, limit int) []*store.Order {
	t.Helper()
	var out []*store.Order
	var after *store.Cursor
	for pages := 0; ; pages++ {
		if pages > 50 {
			t.Fatal("paging does not end")
		}
		list, err := s.SearchOrders(ctx(t), f, after, limit)
		must(t, err)
		if len(list) > limit {
			t.Fatalf("SearchOrders returned %d orders with limit %d", len(list), limit)
		}
		out = append(out, list...)
		if len(list) < limit {
			return out
		}
		last := list[len(list)-1]
		after = &store.Cursor{CreatedAt: last.CreatedAt, OrderID: last.ID}
	}
}

// testSearchOrders: the staff's list across vendors, by status, hold
// reason, vendor and placement time, each alone and together, newest first
// and paged; an order comes back whole (its services too).
func testSearchOrders(t *testing.T, s store.Store) {
	a := newVendor(t, s, base)
	b := newVendor(t, s, base)
	at := func(m int) time.Time { return base.Add(time.Duration(m) * time.Minute) }

	manual := createOrder(t, s, held(newOrder(a.ID, at(1), wire.MVR, wire.PSP), 0, wire.ReasonManualReview))
	identity := createOrder(t, s, held(newOrder(b.ID, at(2), wire.MVR), 0, wire.ReasonIdentityReview))
	report := createOrder(t, s, held(newOrder(a.ID, at(3), wire.MVR, wire.PSP), 1, wire.ReasonReportReview))
	running := createOrder(t, s, newOrder(b.ID, at(4), wire.MVR, wire.PSP))
	// A reason on a service that is not held (processing, report_unavailable)
	// is no hold.
	unavailable := newOrder(a.ID, at(5), wire.MVR)
	unavailable.Services[0].Reason = ptr(wire.ReasonReportUnavailable)
	createOrder(t, s, unavailable)
	done := newOrder(b.ID, at(6), wire.MVR)
	done.Status, done.Final, done.Services[0].Status = wire.StatusCompleted, true, wire.StatusCompleted
	createOrder(t, s, done)
	// Two held orders of one instant: ties break by id, as the vendor list.
	twinA := createOrder(t, s, held(newOrder(a.ID, at(7)), 0, wire.ReasonManualReview))
	twinB := createOrder(t, s, held(newOrder(b.ID, at(7)), 0, wire.ReasonManualReview))
	twins := []*store.Order{twinA, twinB}
	sortNewestFirst(twins)

	newest := func(l ...*store.Order) []string {
		c := append([]*store.Order(nil), l...)
		sortNewestFirst(c)
		return ids(c)
	}
	cases := []struct {
		name string
		f    store.OrderFilter
		want []string
	}{
		{"all", store.OrderFilter{}, newest(manual, identity, report, running, unavailable, done, twinA, twinB)},
		{"under_review", store.OrderFilter{Status: wire.StatusUnderReview}, newest(manual, identity, report, twinA, twinB)},
		{"completed", store.OrderFilter{Status: wire.StatusCompleted}, ids([]*store.Order{done})},
		{"identity_review", store.OrderFilter{HeldFor: wire.ReasonIdentityReview}, ids([]*store.Order{identity})},
		{"manual_review", store.OrderFilter{HeldFor: wire.ReasonManualReview}, newest(manual, twinA, twinB)},
		{"report_review", store.OrderFilter{HeldFor: wire.ReasonReportReview}, ids([]*store.Order{report})},
		{"a reason not held", store.OrderFilter{HeldFor: wire.ReasonReportUnavailable}, []string{}},
		{"vendor", store.OrderFilter{VendorID: a.ID}, newest(manual, report, unavailable, twinA)},
		{"vendor and status", store.OrderFilter{VendorID: b.ID, Status: wire.StatusUnderReview}, newest(identity, twinB)},
		{"since, inclusive", store.OrderFilter{Since: at(6)}, newest(done, twinA, twinB)},
		{"since and reason", store.OrderFilter{Since: at(2), HeldFor: wire.ReasonManualReview, VendorID: a.ID}, ids([]*store.Order{twinA})},
		{"unknown vendor", store.OrderFilter{VendorID: uuid.NewString()}, []string{}},
		// Times past what a signed 64-bit count of nanoseconds holds (after
		// 2262, before 1678) are times still: after every order, before
		// every order.
		{"since 9999", store.OrderFilter{Since: time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)}, []string{}},
		{"since 2263", store.OrderFilter{Since: time.Date(2263, 1, 1, 0, 0, 0, 0, time.UTC)}, []string{}},
		{"since 1600", store.OrderFilter{Since: time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC)}, newest(manual, identity, report, running, unavailable, done, twinA, twinB)},
		{"since year 1", store.OrderFilter{Since: time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC), Status: wire.StatusCompleted}, ids([]*store.Order{done})},
	}
	for _, tc := range cases {
		for _, limit := range []int{100, 2, 1} {
			got := searchAll(t, s, tc.f, limit)
			if !reflect.DeepEqual(ids(got), tc.want) {
				t.Errorf("%s, %d a page:\n got %v\nwant %v", tc.name, limit, ids(got), tc.want)
			}
		}
	}
	got := searchAll(t, s, store.OrderFilter{HeldFor: wire.ReasonReportReview}, 10)
	if len(got) == 1 {
		sameOrder(t, got[0], report)
	}
}
