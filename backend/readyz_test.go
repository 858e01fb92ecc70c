package backend

import (
	"encoding/json"
	"strings"
	"testing"

	"vendorgate/shared/wire"
)

// TestReadyzChecks: the backend's /readyz follows the gateway's conventions
// (?verbose lists the checks, ?exclude=NAME leaves one out), and the
// gateway's prober asks the same checks on the internal listener, behind
// the internal token.
func TestReadyzChecks(t *testing.T) {
	h := start(t)
	internal := h.api + wire.ReadyPath
	token := map[string]string{wire.HeaderInternalToken: testInternalToken}
	type body struct {
		Status   string `json:"status"`
		Database string `json:"database"`
		Checks   []struct {
			Name, Status, Reason string
		} `json:"checks"`
		Warnings []string `json:"warnings"`
	}
	get := func(url string, hdr map[string]string, want int) body {
		t.Helper()
		r := h.do("GET", url, hdr, "")
		var b body
		if r.status != want || json.Unmarshal(r.body, &b) != nil {
			t.Fatalf("GET %s: %d %s, want %d", url, r.status, r.body, want)
		}
		return b
	}
	if b := get(h.admin+"/readyz", nil, 200); b.Status != "ok" || b.Database != "ok" || b.Checks != nil {
		t.Fatalf("/readyz: %+v", b)
	}
	if b := get(h.admin+"/readyz?verbose", nil, 200); len(b.Checks) != 1 || b.Checks[0].Name != "database" || b.Checks[0].Status != "ok" {
		t.Fatalf("/readyz?verbose: %+v", b)
	}
	get(internal, token, 200)
	if r := h.do("GET", internal, nil, ""); r.status != 401 {
		t.Fatalf("internal readiness without the token: %d %s", r.status, r.body)
	}

	h.b.store.Close()
	if b := get(h.admin+"/readyz", nil, 503); b.Status != "unavailable" || b.Database != "unreachable" ||
		len(b.Checks) != 1 || b.Checks[0].Reason == "" {
		t.Fatalf("/readyz with the database closed: %+v", b)
	}
	get(internal, token, 503)
	if b := get(h.admin+"/readyz?exclude=database", nil, 200); b.Database != "excluded" {
		t.Fatalf("/readyz?exclude=database: %+v", b)
	}
	if b := get(h.admin+"/readyz?exclude=redis", nil, 503); len(b.Warnings) != 1 || !strings.Contains(b.Warnings[0], "redis") {
		t.Fatalf("/readyz?exclude=redis: %+v", b)
	}
}
