package backend

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"vendorgate/shared/testlog"
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

// TestAdminRefusesBeforeReadingTheBody: clients without the admin token
// that announce a large body and send none of it are answered 401 at once:
// the server neither waits for the body nor sets memory aside for it (the
// admin listener takes up to 64 MiB, but only from the holder of the token).
func TestAdminRefusesBeforeReadingTheBody(t *testing.T) {
	h := start(t)
	const conns, announced = 8, 60_000_000
	heads := make([]string, conns)
	for i := range heads {
		auth := "" // no token, or a wrong one
		if i%2 == 1 {
			auth = "Authorization: Bearer " + strings.Repeat("x", len(testAdminToken)) + "\r\n"
		}
		heads[i] = fmt.Sprintf("POST /admin/v1/vendors HTTP/1.1\r\nHost: backend\r\n%sContent-Type: application/json\r\n"+
			"Content-Length: %d\r\n\r\n{\"company_name\":", auth, announced)
	}
	// The server's read timeout is 30s: an answer within 10s was given
	// without waiting for the body.
	failures := testlog.RefusedUnread(t, h.admin, heads, announced, 10*time.Second, func(res *http.Response) string {
		if res.StatusCode != 401 || res.Header.Get("WWW-Authenticate") == "" {
			return fmt.Sprintf("status %d, WWW-Authenticate %q; want 401 with a challenge", res.StatusCode, res.Header.Get("WWW-Authenticate"))
		}
		return ""
	})
	if len(failures) > 0 {
		t.Fatal(strings.Join(failures, "\n"))
	}
	// The token holder may still send a large body: 1 MiB of JSON is
	// read whole (and refused for its content, not its size).
	big := `{"company_name":"` + strings.Repeat("a", 1<<20) + `"}`
	if r := h.adminCall("POST", "/admin/v1/vendors", big); r.status == 401 || r.status == 413 {
		t.Fatalf("a large body with the token: %d %s", r.status, r.body)
	}
}
