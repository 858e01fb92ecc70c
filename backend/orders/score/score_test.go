package score

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

// derived sets the order status the way the orders package does, for the
// cases below: under_review while anything is held.
func derived(services []store.Service) *store.Order {
	o := &store.Order{Services: services, Driver: wire.Driver{LicenseNumber: "D1234567"}, Status: wire.StatusCompleted}
	for _, s := range services {
		if s.Status == wire.StatusUnderReview {
			o.Status = wire.StatusUnderReview
		}
	}
	return o
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
			o := derived(c.services)
			s := Of(o)
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
			if used != c.used || s.Score < 0 || s.Score > 100 || *s.Grade != Grade(s.Score) || *s.RiskLevel != Risk(s.Score) ||
				s.CalculatedAt == nil || s.CalculatedAt.Nanosecond() != 0 {
				t.Fatalf("score = %+v; want reports_used %s", s, c.used)
			}
			if again := Of(o); again.Score != s.Score {
				t.Fatal("score is not deterministic")
			}
		})
	}
}

func TestGradeAndRisk(t *testing.T) {
	for score, want := range map[int][2]string{100: {"A", "low"}, 90: {"A", "low"}, 89: {"B", "low"}, 80: {"B", "low"},
		79: {"C", "moderate"}, 70: {"C", "moderate"}, 65: {"D", "moderate"}, 60: {"D", "moderate"}, 59: {"F", "high"}, 0: {"F", "high"}} {
		if g, r := Grade(score), Risk(score); g != want[0] || r != want[1] {
			t.Errorf("%d: %s %s; want %v", score, g, r, want)
		}
	}
}
