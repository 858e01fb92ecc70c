package orders

import (
	"testing"
	"time"

	"vendorgate/backend/store"
	"vendorgate/shared/wire"
)

func TestNormaliseMC(t *testing.T) {
	cases := map[string]string{
		"MC-123456": "MC123456", "mc-012345": "MC12345", "MC 12345": "MC12345", "12345": "MC12345",
		"  mc0000001 ": "MC1", "MC12345678": "MC12345678", "000012345678": "MC12345678",
		"MC123456789": "", "MC": "", "MC-000": "", "": "", "MX123": "", "12a45": "", "MC-12_3": "",
	}
	for in, want := range cases {
		got, ok := NormaliseMC(in)
		if ok != (want != "") || got != want {
			t.Errorf("NormaliseMC(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}

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

func TestSafetyScore(t *testing.T) {
	cases := []struct {
		name     string
		services []store.Service
		used     string // "" means null
	}{
		{"no mvr nor psp", []store.Service{svc("cdlis", "completed", ""), svc("driver_reviews", "completed", "")}, ""},
		{"not yet calculated", []store.Service{svc("mvr", "processing", ""), svc("psp", "processing", "")}, ""},
		{"mvr under review", []store.Service{svc("mvr", "under_review", "manual_review"), svc("psp", "completed", "")}, ""},
		{"order under review", []store.Service{svc("mvr", "completed", ""), svc("psp", "under_review", "report_review")}, ""},
		{"mvr only", []store.Service{svc("mvr", "completed", ""), svc("psp", "processing", "")}, "mvr"},
		{"psp after mvr failed", []store.Service{svc("mvr", "failed", "no_record"), svc("psp", "completed", "")}, "psp"},
		{"both", []store.Service{svc("psp", "completed", ""), svc("mvr", "completed", "")}, "mvr,psp"},
		{"both failed", []store.Service{svc("mvr", "failed", "no_record"), svc("psp", "failed", "no_record")}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := &store.Order{Services: c.services, Driver: wire.Driver{LicenseNumber: "D1234567"}}
			derive(o)
			s := safetyScore(o)
			if c.used == "" {
				if s != nil {
					t.Fatalf("score = %+v; want null", s)
				}
				return
			}
			if s == nil {
				t.Fatal("score is null")
			}
			used := ""
			for i, u := range s.ReportsUsed {
				if i > 0 {
					used += ","
				}
				used += u
			}
			if used != c.used || s.Score < 0 || s.Score > 100 || *s.Grade != gradeOf(s.Score) || *s.RiskLevel != riskOf(s.Score) ||
				s.CalculatedAt == nil || s.CalculatedAt.Nanosecond() != 0 {
				t.Fatalf("score = %+v; want reports_used %s", s, c.used)
			}
			if again := safetyScore(o); again.Score != s.Score {
				t.Fatal("score is not deterministic")
			}
		})
	}
}

func TestGradeAndRisk(t *testing.T) {
	for score, want := range map[int][2]string{100: {"A", "low"}, 90: {"A", "low"}, 89: {"B", "low"}, 80: {"B", "low"},
		79: {"C", "moderate"}, 70: {"C", "moderate"}, 65: {"D", "moderate"}, 60: {"D", "moderate"}, 59: {"F", "high"}, 0: {"F", "high"}} {
		if g, r := gradeOf(score), riskOf(score); g != want[0] || r != want[1] {
			t.Errorf("%d: %s %s; want %v", score, g, r, want)
		}
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
