// Package score is the Safety Score of an order, calculated from its MVR
// and PSP results.
package score

import (
	"crypto/sha256"
	"time"

	"vendorgate/backend/store"
	"vendorgate/shared/wire"
)

// Of is the order's Safety Score, or nil when the specification
// says so: the order has neither MVR nor PSP; neither report is available
// yet; the order is under review; or its MVR is under review. A failed MVR
// leaves the score to the PSP alone.
//
// The score is deterministic (a hash of the license number and the reports
// used), the sandbox provider's stand-in for a real scoring model, so that
// the same driver always scores the same.
func Of(o *store.Order) *wire.SafetyScore {
	if o.Status == wire.StatusUnderReview {
		return nil
	}
	var used []string
	var at time.Time
	for _, name := range []string{wire.MVR, wire.PSP} {
		for _, sv := range o.Services {
			if sv.Name != name {
				continue
			}
			if name == wire.MVR && sv.Status == wire.StatusUnderReview {
				return nil
			}
			if sv.Status == wire.StatusCompleted {
				used = append(used, name)
				if sv.CompletedAt != nil && sv.CompletedAt.After(at) {
					at = *sv.CompletedAt
				}
			}
		}
	}
	if len(used) == 0 {
		return nil
	}
	h := sha256.New()
	h.Write([]byte(o.Driver.LicenseNumber))
	for _, u := range used {
		h.Write([]byte{0})
		h.Write([]byte(u))
	}
	sum := h.Sum(nil)
	score := 100 - int(sum[0])%61 // 40 to 100
	grade, risk := Grade(score), Risk(score)
	at = at.Truncate(time.Second)
	return &wire.SafetyScore{Score: score, Grade: &grade, RiskLevel: &risk, ReportsUsed: used, CalculatedAt: &at}
}

// Grade maps a score to A (90+), B (80+), C (70+), D (60+) or F.
func Grade(score int) string {
	switch {
	case score >= 90:
		return "A"
	case score >= 80:
		return "B"
	case score >= 70:
		return "C"
	case score >= 60:
		return "D"
	}
	return "F"
}

// Risk maps a score to low (80+), moderate (60+) or high.
func Risk(score int) string {
	switch {
	case score >= 80:
		return "low"
	case score >= 60:
		return "moderate"
	}
	return "high"
}
