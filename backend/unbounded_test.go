package backend

import (
	"fmt"
	"strings"
	"testing"
)

// TestRequestMetricGroupsMethods: a client inventing methods (curl -X M1,
// -X M2, ...) must not mint a series per method; unknown methods count as
// "other".
func TestRequestMetricGroupsMethods(t *testing.T) {
	h := start(t)
	const odd = 200
	for i := range odd {
		h.do(fmt.Sprintf("M%d", i), h.api+"/healthz", nil, "")
		h.do(fmt.Sprintf("X%d", i), h.admin+"/admin/v1/vendors", nil, "")
	}
	h.do("GET", h.admin+"/healthz", nil, "")
	text := string(h.do("GET", h.admin+"/metrics", nil, "").body)
	methods := map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "vendorgate_backend_requests_total{") {
			continue
		}
		_, rest, _ := strings.Cut(line, `method="`)
		m, _, _ := strings.Cut(rest, `"`)
		methods[m] = true
	}
	var unknown []string
	for m := range methods {
		switch m {
		case "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE", "other":
		default:
			unknown = append(unknown, m)
		}
	}
	if len(unknown) > 0 {
		t.Fatalf("%d method labels outside the known set (%q, ...): unknown methods must count as \"other\"", len(unknown), unknown[0])
	}
	if !methods["other"] || !methods["GET"] {
		t.Fatalf("method labels %v, want GET and other", methods)
	}
	t.Logf("%d method labels after %d requests with invented methods", len(methods), 2*odd)
}
