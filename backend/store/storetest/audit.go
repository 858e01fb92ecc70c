package storetest

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"vendorgate/backend/store"
)

func auditRecord(id string, at time.Time, action, vendorID, orderID string) *store.AuditRecord {
	return &store.AuditRecord{ID: id, At: at, Actor: "ops-alice", Action: action, VendorID: vendorID, KeyID: "",
		OrderID: orderID, Service: "mvr", Address: "127.0.0.1", RequestID: "rid-" + id}
}

func auditIDs(rs []*store.AuditRecord) []string {
	out := []string{}
	for _, r := range rs {
		out = append(out, r.ID)
	}
	return out
}

// testAudit: records round-trip, filters select, newest first, limit
// bounds, and DeleteAuditBefore removes only those older than its time.
func testAudit(t *testing.T, s store.Store) {
	c := ctx(t)
	recs := []*store.AuditRecord{
		auditRecord("a1", base, "vendor.created", "v1", ""),
		auditRecord("a2", base.Add(time.Minute), "order.released", "v1", "o1"),
		auditRecord("a3", base.Add(2*time.Minute), "report.downloaded", "v2", "o2"),
		auditRecord("a4", base.Add(3*time.Minute), "order.released", "v2", "o2"),
	}
	for _, r := range recs {
		must(t, s.AppendAudit(c, r))
	}
	all, err := s.ListAudit(c, store.AuditFilter{Limit: 10})
	must(t, err)
	if got, want := auditIDs(all), []string{"a4", "a3", "a2", "a1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("all = %v, want %v", got, want)
	}
	got := all[3]
	sameTime(t, "at", got.At, base)
	got.At = base
	if !reflect.DeepEqual(got, recs[0]) {
		t.Errorf("round trip = %+v, want %+v", got, recs[0])
	}
	for _, tc := range []struct {
		name string
		f    store.AuditFilter
		want []string
	}{
		{"vendor", store.AuditFilter{VendorID: "v2", Limit: 10}, []string{"a4", "a3"}},
		{"order", store.AuditFilter{OrderID: "o1", Limit: 10}, []string{"a2"}},
		{"action", store.AuditFilter{Action: "order.released", Limit: 10}, []string{"a4", "a2"}},
		{"since", store.AuditFilter{Since: base.Add(2 * time.Minute), Limit: 10}, []string{"a4", "a3"}},
		{"all of them", store.AuditFilter{VendorID: "v2", OrderID: "o2", Action: "report.downloaded", Since: base, Limit: 10}, []string{"a3"}},
		{"limit", store.AuditFilter{Limit: 2}, []string{"a4", "a3"}},
	} {
		rs, err := s.ListAudit(c, tc.f)
		must(t, err)
		if got := auditIDs(rs); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if _, err := s.ListAudit(c, store.AuditFilter{}); err == nil {
		t.Error("ListAudit with no limit: no error")
	}
	if err := s.AppendAudit(c, auditRecord("a1", base, "vendor.created", "v9", "")); err == nil {
		t.Error("a second record with id a1 was appended")
	}
	n, err := s.DeleteAuditBefore(c, base.Add(2*time.Minute))
	must(t, err)
	if n != 2 {
		t.Errorf("DeleteAuditBefore deleted %d, want 2", n)
	}
	left, err := s.ListAudit(c, store.AuditFilter{Limit: 10})
	must(t, err)
	if got, want := auditIDs(left), []string{"a4", "a3"}; !reflect.DeepEqual(got, want) {
		t.Errorf("after retention: %v, want %v", got, want)
	}
}

// testAuditNoUpdateMethod: the Store interface offers no way to change an
// audit record: its only audit methods append, list and delete by age.
func testAuditNoUpdateMethod(t *testing.T, s store.Store) {
	typ := reflect.TypeOf((*store.Store)(nil)).Elem()
	var audit []string
	for i := 0; i < typ.NumMethod(); i++ {
		if name := typ.Method(i).Name; strings.Contains(name, "Audit") {
			audit = append(audit, name)
		}
	}
	if want := []string{"AppendAudit", "DeleteAuditBefore", "ListAudit"}; !reflect.DeepEqual(audit, want) {
		t.Errorf("Store's audit methods = %v, want only %v", audit, want)
	}
}
