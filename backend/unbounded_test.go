package backend

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
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
	addr := strings.TrimPrefix(h.admin, "http://")
	const conns, announced = 8, 60_000_000
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	cs := make([]net.Conn, conns)
	for i := range cs {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cs[i] = c
		auth := "" // no token, or a wrong one
		if i%2 == 1 {
			auth = "Authorization: Bearer " + strings.Repeat("x", len(testAdminToken)) + "\r\n"
		}
		req := fmt.Sprintf("POST /admin/v1/vendors HTTP/1.1\r\nHost: backend\r\n%sContent-Type: application/json\r\n"+
			"Content-Length: %d\r\n\r\n{\"company_name\":", auth, announced)
		if _, err := c.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
	}
	// The server's read timeout is 30s: an answer within 10s was given
	// without waiting for the body.
	deadline := time.Now().Add(10 * time.Second)
	var failures []string
	for i, c := range cs {
		_ = c.SetReadDeadline(deadline)
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			failures = append(failures, fmt.Sprintf("connection %d: no answer while the announced body was not sent: %v", i, err))
			continue
		}
		res.Body.Close()
		if res.StatusCode != 401 || res.Header.Get("WWW-Authenticate") == "" {
			failures = append(failures, fmt.Sprintf("connection %d: status %d, WWW-Authenticate %q; want 401 with a challenge",
				i, res.StatusCode, res.Header.Get("WWW-Authenticate")))
		}
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("heap grew %d MiB while %d unauthenticated connections announced %d MB each", grew>>20, conns, announced/1_000_000)
	if grew > conns*announced/4 {
		failures = append(failures, fmt.Sprintf("heap grew %d MiB: the server set memory aside for bodies it had no token for", grew>>20))
	}
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
