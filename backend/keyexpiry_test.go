package backend

import (
	"fmt"
	"strings"
	"testing"
)

// TestVendorsKeysExpiringGauge: vendorgate_backend_vendors_keys_expiring
// counts the approved live vendors whose every working key expires within
// 7 days, with no vendor label: a live vendor with only a 3-day key counts,
// until it is issued a 30-day key; a sandbox vendor with a 3-day key never
// counts.
func TestVendorsKeysExpiringGauge(t *testing.T) {
	h := start(t)
	gauge := func() string {
		t.Helper()
		for _, l := range strings.Split(string(h.do("GET", h.admin+"/metrics", nil, "").body), "\n") {
			if strings.HasPrefix(l, "vendorgate_backend_vendors_keys_expiring") {
				return l
			}
		}
		t.Fatal("no vendorgate_backend_vendors_keys_expiring in /metrics")
		return ""
	}
	issue := func(vendorID string, days int) {
		t.Helper()
		if r := h.adminCall("POST", "/admin/v1/vendors/"+vendorID+"/keys", fmt.Sprintf(`{"lifetime_seconds":%d}`, days*86400)); r.status != 201 {
			t.Fatalf("issue key: %d %s", r.status, r.body)
		}
	}
	if g := gauge(); g != "vendorgate_backend_vendors_keys_expiring 0" {
		t.Fatalf("with no vendor: %q", g)
	}
	live, sandbox := h.newVendor("live"), h.newVendor("sandbox")
	issue(live, 3)
	issue(sandbox, 3)
	if g := gauge(); g != "vendorgate_backend_vendors_keys_expiring 1" {
		t.Errorf("a live vendor with only a 3-day key: %q, want 1", g)
	}
	issue(live, 30)
	if g := gauge(); g != "vendorgate_backend_vendors_keys_expiring 0" {
		t.Errorf("the live vendor issued a 30-day key: %q, want 0", g)
	}
}
