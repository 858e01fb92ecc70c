package e2e

import (
	"strings"
	"testing"
)

// TestMeThroughGatewayWithRedis is the foundation's proof: a key issued by
// vendorctl reads the vendor through the gateway with Redis limiting on.
func TestMeThroughGatewayWithRedis(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{redis: true})
	vendorID, key := s.newVendor("sandbox", "mvr,psp,cdlis,driver_reviews")
	if !strings.HasPrefix(key, "vgsandbx_") {
		t.Fatalf("sandbox key %q lacks the sandbox prefix", key[:9])
	}

	r := s.do("GET", s.gwURLs[0]+"/api/vendor/v1/me", key, nil, nil)
	if r.status != 200 {
		t.Fatalf("GET /me = %d %s", r.status, r.body)
	}
	var v struct {
		VendorID        string   `json:"vendor_id"`
		CompanyName     string   `json:"company_name"`
		Environment     string   `json:"environment"`
		EnabledServices []string `json:"enabled_services"`
	}
	decode(t, string(r.body), &v)
	if v.VendorID != vendorID || v.Environment != "sandbox" || v.CompanyName != "Acme sandbox" ||
		strings.Join(v.EnabledServices, ",") != "mvr,psp,cdlis,driver_reviews" {
		t.Fatalf("vendor = %+v", v)
	}
	if r.header.Get("Cache-Control") != "no-store" || r.header.Get("X-Request-Id") == "" {
		t.Fatalf("headers: %v", r.header)
	}
	if r.header.Get("RateLimit-Policy") == "" {
		t.Fatalf("no RateLimit-Policy on a limited route: %v", r.header)
	}
	// The limit was counted in Redis itself, not in process.
	if keys := s.redis.Do(t, "DBSIZE"); keys == ":0" {
		t.Fatalf("no limiter key in Redis after an allowed read")
	}

	bad := s.do("GET", s.gwURLs[0]+"/api/vendor/v1/me", "vgsandbx_"+strings.Repeat("A", 43), nil, nil)
	if bad.status != 401 || bad.errorCode() != "invalid_api_key" {
		t.Fatalf("unknown key = %d %s", bad.status, bad.body)
	}
}
