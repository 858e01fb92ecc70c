package orders

import (
	"testing"
	"time"

	"vendorgate/backend/store"
	"vendorgate/shared/wire"
)

func svc(name, status, reason string) store.Service {
	s := store.Service{Name: name, Status: status}
	if reason != "" {
		s.Reason = &reason
	}
	if status == wire.StatusCompleted {
		t := time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC)
		s.CompletedAt = &t
	}
	return s
}

func TestDeriveStatus(t *testing.T) {
	cases := []struct {
		name     string
		services []store.Service
		status   string
		final    bool
	}{
		{"all running", []store.Service{svc("mvr", "processing", ""), svc("psp", "processing", "")}, "processing", false},
		{"one running", []store.Service{svc("mvr", "completed", ""), svc("psp", "processing", "report_unavailable")}, "processing", false},
		{"held beats running", []store.Service{svc("mvr", "under_review", "manual_review"), svc("psp", "processing", "")}, "under_review", false},
		{"held beats final", []store.Service{svc("mvr", "completed", ""), svc("psp", "under_review", "report_review")}, "under_review", false},
		{"unknown status is not final", []store.Service{svc("mvr", "completed", ""), svc("psp", "queued", "")}, "processing", false},
		{"all completed", []store.Service{svc("mvr", "completed", ""), svc("psp", "completed", "")}, "completed", true},
		{"all failed", []store.Service{svc("mvr", "failed", "no_record"), svc("psp", "failed", "provider_failed")}, "failed", true},
		{"mixed", []store.Service{svc("mvr", "failed", "no_record"), svc("psp", "completed", "")}, "partially_completed", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			next := time.Now()
			o := &store.Order{Services: c.services, NextStepAt: &next}
			derive(o)
			if o.Status != c.status || o.Final != c.final {
				t.Fatalf("derive = %s %v; want %s %v", o.Status, o.Final, c.status, c.final)
			}
			if o.Final && o.NextStepAt != nil {
				t.Fatal("a final order keeps a next step")
			}
		})
	}
}

func TestCursorRoundTrip(t *testing.T) {
	o := &store.Order{ID: "6f1c1c7e-1111-4d2a-9c77-0123456789ab", CreatedAt: time.Unix(0, 1234567890123).UTC()}
	c, ok := decodeCursor(encodeCursor(o))
	if !ok || c.OrderID != o.ID || !c.CreatedAt.Equal(o.CreatedAt) {
		t.Fatalf("cursor = %+v, %v", c, ok)
	}
	for _, bad := range []string{"", "!!", "bm9wZQ", "MTIzOm5vdC1hLXV1aWQ"} {
		if _, ok := decodeCursor(bad); ok {
			t.Errorf("decodeCursor(%q) accepted", bad)
		}
	}
}

func TestDefaults(t *testing.T) {
	if _, err := New(Options{}); err == nil {
		t.Fatal("New without a store succeeded")
	}
}
