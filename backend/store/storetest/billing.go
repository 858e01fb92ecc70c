package storetest

import (
	"reflect"
	"sort"
	"testing"
	"time"

	"vendorgate/backend/store"
	"vendorgate/shared/wire"
)

// svc is a service in the given status and reason.
func svc(name, status, reason string, completed *time.Time) store.Service {
	s := store.Service{Name: name, Status: status, CompletedAt: completed}
	if reason != "" {
		s.Reason = ptr(reason)
	}
	return s
}

// billingOrders places, for v, orders in March 2026 (base's month, UTC)
// and one on each side of it, and returns the ids of the March orders'
// billable services.
func billingOrders(t *testing.T, s store.Store, v *store.Vendor) []string {
	done := ptr(base.Add(time.Hour))
	march := []*store.Order{
		newOrder(v.ID, base), newOrder(v.ID, base.Add(time.Minute)), newOrder(v.ID, base.Add(2*time.Minute)),
	}
	march[0].Services = []store.Service{svc(wire.MVR, wire.StatusCompleted, "", done), svc(wire.PSP, wire.StatusFailed, wire.ReasonNoRecord, nil)}
	march[1].Services = []store.Service{svc(wire.MVR, wire.StatusFailed, wire.ReasonProviderFailed, nil), svc(wire.PSP, wire.StatusUnderReview, "report_review", nil)}
	march[2].Services = []store.Service{svc(wire.MVR, wire.StatusProcessing, "", nil)}
	march[2].Environment = "live"
	outside := []*store.Order{
		newOrder(v.ID, time.Date(2026, 2, 28, 23, 59, 59, 0, time.UTC)),
		newOrder(v.ID, time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)),
	}
	for _, o := range outside {
		o.Services = []store.Service{svc(wire.MVR, wire.StatusCompleted, "", done)}
	}
	for _, o := range append(march, outside...) {
		createOrder(t, s, o)
	}
	return []string{store.BillingEventID(march[0].ID, wire.MVR), store.BillingEventID(march[0].ID, wire.PSP)}
}

// testServiceUsage: a month's counts per vendor, environment and service
// are exactly those of the orders placed in it, one vendor or all.
func testServiceUsage(t *testing.T, s store.Store) {
	v1, v2 := newVendor(t, s, base), newVendor(t, s, base)
	billingOrders(t, s, v1)
	o := newOrder(v2.ID, base, wire.CDLIS)
	o.Services[0] = svc(wire.CDLIS, wire.StatusCompleted, "", ptr(base))
	createOrder(t, s, o)
	from, to := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)
	got, err := s.ServiceUsage(ctx(t), v1.ID, from, to)
	must(t, err)
	want := []store.ServiceUsage{
		{VendorID: v1.ID, Environment: "live", Service: wire.MVR, Ordered: 1},
		{VendorID: v1.ID, Environment: "sandbox", Service: wire.MVR, Ordered: 2, Completed: 1, Failed: 1},
		{VendorID: v1.ID, Environment: "sandbox", Service: wire.PSP, Ordered: 2, Failed: 1, NoRecord: 1, Held: 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("v1's March = %+v, want %+v", got, want)
	}
	if b := got[1].Billable() + got[2].Billable(); b != 2 {
		t.Errorf("billable = %d, want 2 (a completed mvr, a no_record psp)", b)
	}
	all, err := s.ServiceUsage(ctx(t), "", from, to)
	must(t, err)
	if len(all) != 4 {
		t.Fatalf("every vendor's March = %+v, want v1's 3 rows and v2's 1", all)
	}
	want2 := store.ServiceUsage{VendorID: v2.ID, Environment: "sandbox", Service: wire.CDLIS, Ordered: 1, Completed: 1}
	if i := sort.Search(len(all), func(i int) bool { return all[i].VendorID >= v2.ID }); i == len(all) || all[i] != want2 {
		t.Errorf("v2's row missing from %+v", all)
	}
	none, err := s.ServiceUsage(ctx(t), v1.ID, to, to.AddDate(0, 0, 1))
	must(t, err)
	if len(none) != 1 || none[0].Ordered != 1 || none[0].Completed != 1 {
		t.Errorf("April 1st = %+v, want the one order placed at its first instant", none)
	}
}

// testUsageFlush: a flush adds to its day's totals once however often it
// is applied; flushes of other ids add up; a month reads its days only.
func testUsageFlush(t *testing.T, s store.Store) {
	c := ctx(t)
	f := store.UsageFlush{ID: "gw1-1", Day: "2026-03-31", At: base, Rows: []store.GatewayUsage{
		{VendorID: "v1", Policy: "standard", Allowed: 10, Limited: 2, ShadowLimited: 1},
		{VendorID: "v2", Policy: "standard", Allowed: 5},
	}}
	for i, want := range []bool{true, false, false} {
		applied, err := s.ApplyUsageFlush(c, f)
		must(t, err)
		if applied != want {
			t.Errorf("apply %d: applied = %v, want %v", i+1, applied, want)
		}
	}
	f2 := store.UsageFlush{ID: "gw2-1", Day: "2026-03-31", At: base, Rows: []store.GatewayUsage{{VendorID: "v1", Policy: "standard", Allowed: 1, Limited: 3}}}
	f3 := store.UsageFlush{ID: "gw1-2", Day: "2026-04-01", At: base, Rows: []store.GatewayUsage{{VendorID: "v1", Policy: "standard", Allowed: 100}}}
	for _, x := range []store.UsageFlush{f2, f3} {
		_, err := s.ApplyUsageFlush(c, x)
		must(t, err)
	}
	got, err := s.GatewayUsage(c, "v1", "2026-03-01", "2026-04-01")
	must(t, err)
	want := []store.GatewayUsage{{VendorID: "v1", Policy: "standard", Allowed: 11, Limited: 5, ShadowLimited: 1}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("v1's March = %+v, want %+v", got, want)
	}
	all, err := s.GatewayUsage(c, "", "2026-03-01", "2026-04-01")
	must(t, err)
	if len(all) != 2 || all[1] != (store.GatewayUsage{VendorID: "v2", Policy: "standard", Allowed: 5}) {
		t.Errorf("every vendor's March = %+v", all)
	}
	if _, err := s.ApplyUsageFlush(c, store.UsageFlush{ID: "x", Day: "2026-3-1", At: base}); err == nil {
		t.Error("a flush whose day is not YYYY-MM-DD was applied")
	}
	// Two days on, the first flush's id is forgotten (a third flush
	// prunes it): what the memory promises, and no longer.
	_, err = s.ApplyUsageFlush(c, store.UsageFlush{ID: "gw1-3", Day: "2026-04-02", At: base.Add(store.UsageFlushMemory + time.Second)})
	must(t, err)
	applied, err := s.ApplyUsageFlush(c, store.UsageFlush{ID: "gw1-1", Day: "2026-03-31", At: base.Add(store.UsageFlushMemory + time.Second)})
	must(t, err)
	if !applied {
		t.Error("a flush id older than UsageFlushMemory was still remembered")
	}
}

// testBillingOutbox: every billable service is enqueued once, under its
// stable id; due events are listed until marked sent; a retry counts an
// attempt and waits for its time.
func testBillingOutbox(t *testing.T, s store.Store) {
	c := ctx(t)
	v := newVendor(t, s, base)
	march := billingOrders(t, s, v)
	now := base.Add(2 * time.Hour)
	since := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	must(t, s.EnqueueBillable(c, since, now))
	must(t, s.EnqueueBillable(c, since, now.Add(time.Minute))) // again: nothing new
	due, err := s.DueBillingEvents(c, now, 100)
	must(t, err)
	var got []string
	for _, e := range due {
		got = append(got, e.ID)
		if e.VendorID != v.ID || e.Environment != "sandbox" || e.Attempts != 0 {
			t.Errorf("event %+v", e)
		}
		inUTC(t, "at", e.At)
	}
	sort.Strings(got)
	wantIDs := append([]string(nil), march[:2]...)
	// April's order (placed after since) is billable too.
	if len(got) != 3 {
		t.Fatalf("due = %v, want March's %v and April's one", got, wantIDs)
	}
	for _, id := range wantIDs {
		if i := sort.SearchStrings(got, id); i == len(got) || got[i] != id {
			t.Errorf("due %v lacks %s", got, id)
		}
	}
	for _, e := range due {
		switch e.ID {
		case march[0]:
			if e.Outcome != "completed" || e.Service != wire.MVR {
				t.Errorf("completed mvr = %+v", e)
			}
			sameTime(t, "completed mvr's time", e.At, base.Add(time.Hour))
		case march[1]:
			if e.Outcome != "no_record" || e.Service != wire.PSP {
				t.Errorf("no_record psp = %+v", e)
			}
			sameTime(t, "no_record psp's time (when found)", e.At, now)
		}
	}
	n, err := s.CountBillingOutbox(c)
	must(t, err)
	if n != 3 {
		t.Errorf("outbox holds %d, want 3", n)
	}
	must(t, s.MarkBillingSent(c, []string{march[0]}, now))
	must(t, s.RetryBillingEvents(c, []string{march[1]}, now.Add(time.Minute)))
	due, err = s.DueBillingEvents(c, now, 100)
	must(t, err)
	if len(due) != 1 || due[0].ID == march[0] || due[0].ID == march[1] {
		t.Errorf("after one sent and one retried later, due = %+v, want April's only", due)
	}
	due, err = s.DueBillingEvents(c, now.Add(time.Minute), 1)
	must(t, err)
	if len(due) != 1 {
		t.Fatalf("limit 1 gave %d", len(due))
	}
	due, err = s.DueBillingEvents(c, now.Add(time.Minute), 100)
	must(t, err)
	for _, e := range due {
		if e.ID == march[1] && e.Attempts != 1 {
			t.Errorf("retried event's attempts = %d, want 1", e.Attempts)
		}
	}
	if len(due) != 2 {
		t.Errorf("at the retry's time due = %+v, want 2", due)
	}
	n, err = s.CountBillingOutbox(c)
	must(t, err)
	if n != 2 {
		t.Errorf("outbox holds %d unsent, want 2", n)
	}
}
