package main

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"vendorgate/backend/audit"
	"vendorgate/cmd/vendorctl/internal/view"
	"vendorgate/shared/wire"
)

const (
	aliceToken = "audit-test-alice-token-0123456"
	bobToken   = "audit-test-bob-token-01234567"
)

// as runs vendorctl with the named admin token.
func (h *harness) as(token string, args ...string) string {
	h.t.Helper()
	r := h.runCtl(map[string]string{"VENDORCTL_ADMIN_URL": h.adminURL, "VENDORCTL_ADMIN_TOKEN": token}, args...)
	if r.code != 0 || r.stderr != "" {
		h.t.Fatalf("vendorctl %q: exit %d\nstderr: %s", args, r.code, r.stderr)
	}
	return r.stdout
}

func (h *harness) auditList(args ...string) []audit.Record {
	h.t.Helper()
	var rs []audit.Record
	if err := json.Unmarshal([]byte(h.ctl(append([]string{"-o", "json", "audit", "list"}, args...)...)), &rs); err != nil {
		h.t.Fatal(err)
	}
	return rs
}

func actionsOf(rs []audit.Record) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Actor+" "+r.Action)
	}
	return out
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// TestAuditTrailAgainstBackend: every admin action and report download made
// through vendorctl and the vendor API is one record, naming the admin
// token that acted, the address and the request id, with ids and never
// driver data; audit list filters it; no admin route changes it; bad input
// exits 2 with the usage line and the API answers the error envelope.
func TestAuditTrailAgainstBackend(t *testing.T) {
	h := startBackend(t, "BACKEND_ADMIN_TOKENS=alice:"+aliceToken+",bob:"+bobToken)

	v := decodeInto[view.Vendor](t, h.as(aliceToken, "-o", "json", "vendor", "create", "--company", "Audit Co", "--environment", "sandbox",
		"--services", "mvr,psp"))
	h.as(aliceToken, "vendor", "approve", v.VendorID)
	h.as(aliceToken, "vendor", "services", v.VendorID, "mvr,psp,cdlis")
	k := decodeInto[view.IssuedKey](t, h.as(aliceToken, "-o", "json", "key", "issue", v.VendorID))
	rot := decodeInto[view.RotatedKey](t, h.as(bobToken, "-o", "json", "key", "rotate", k.KeyID, "--overlap", "0"))
	h.as(bobToken, "key", "revoke", rot.KeyID)
	h.as(aliceToken, "vendor", "suspend", v.VendorID)
	h.ctl("vendor", "reinstate", v.VendorID) // the single admin_token: "admin"

	// A held order, released; its report downloaded through the vendor API
	// as the gateway forwards it; another completed, failed and deleted.
	held := h.placeOrder(v.VendorID, "D1230003", "mvr")
	h.waitFor(held, "mvr held", func(o wire.Order) bool { return service(o, "mvr").Status == wire.StatusUnderReview })
	h.as(bobToken, "order", "release", held, "--service", "mvr")
	req, _ := http.NewRequest(http.MethodGet, h.apiURL+"/api/vendor/v1/orders/"+held+"/reports/mvr", nil)
	req.Header.Set(wire.HeaderInternalToken, testInternalToken)
	req.Header.Set(wire.HeaderVendorID, v.VendorID)
	req.Header.Set(wire.HeaderEnvironment, "sandbox")
	req.Header.Set(wire.HeaderKeyID, rot.KeyID)
	req.Header.Set(wire.HeaderForwardedFor, "192.0.2.7")
	req.Header.Set(wire.HeaderRequestID, "rid-report-download-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("report download: %s", resp.Status)
	}
	stuck := h.placeOrder(v.VendorID, "D1230007", "mvr", "psp", "cdlis")
	h.as(aliceToken, "order", "complete", stuck, "--service", "psp")
	h.as(aliceToken, "order", "fail", stuck, "--service", "cdlis", "--reason", "no_record")
	h.as(bobToken, "order", "delete", stuck)

	raw := h.ctl("-o", "json", "audit", "list", "--vendor", v.VendorID)
	for _, personal := range []string{"D1230003", "D1230007", "Ann", "Lee", "1980-02-03"} {
		if strings.Contains(raw, personal) {
			t.Errorf("audit records hold driver data %q:\n%s", personal, raw)
		}
	}
	all := h.auditList("--vendor", v.VendorID)
	want := []string{"bob order.deleted", "alice order.failed", "alice order.completed", "vendor report.downloaded",
		"bob order.released", "admin vendor.reinstated", "alice vendor.suspended", "bob key.revoked",
		"bob key.revoked", "bob key.issued", "bob key.rotated", "alice key.issued", "alice vendor.services_changed", "alice vendor.approved", "alice vendor.created"}
	if got := actionsOf(all); !slices.Equal(got, want) {
		t.Fatalf("audit list --vendor, newest first:\n got %q\nwant %q", got, want)
	}
	seen := map[string]bool{}
	for _, r := range all {
		if str(r.VendorID) != v.VendorID || r.RequestID == nil || *r.RequestID == "" || seen[r.ID] {
			t.Errorf("record %+v: want the vendor, a request id, a distinct id", r)
		}
		seen[r.ID] = true
		if r.Actor != "vendor" && r.Address != "127.0.0.1" {
			t.Errorf("admin record %s from %q, want 127.0.0.1", r.Action, r.Address)
		}
	}
	dl := h.auditList("--order", held, "--action", "report.downloaded", "--since", "1h")
	if len(dl) != 1 || str(dl[0].KeyID) != rot.KeyID || str(dl[0].Service) != "mvr" || dl[0].Address != "192.0.2.7" ||
		str(dl[0].RequestID) != "rid-report-download-1" || str(dl[0].OrderID) != held {
		t.Errorf("report download record: %+v", dl)
	}
	if got := actionsOf(h.auditList("--order", stuck)); !slices.Equal(got, []string{"bob order.deleted", "alice order.failed", "alice order.completed"}) {
		t.Errorf("audit list --order %s: %q", stuck, got)
	}
	if got := h.auditList("--since", "2099-01-01T00:00:00Z"); len(got) != 0 {
		t.Errorf("records after 2099: %+v", got)
	}
	if out := h.ctl("audit", "list", "--vendor", v.VendorID, "--action", "key.rotated"); !strings.Contains(out, k.KeyID) || !strings.Contains(out, "bob") {
		t.Errorf("audit list table:\n%s", out)
	}
	// A rotation's new key is a key.issued of its own; the old one is revoked (overlap 0).
	issued := h.auditList("--vendor", v.VendorID, "--action", "key.issued")
	if len(issued) != 2 || str(issued[0].KeyID) != rot.KeyID || str(issued[1].KeyID) != k.KeyID {
		t.Errorf("key.issued records: %+v, want %s then %s", issued, rot.KeyID, k.KeyID)
	}

	// Bad input: exit 2 with the reason and the usage line, before any call.
	for _, args := range [][]string{{"audit", "list", "--since", "yesterday"}, {"audit", "list", "--action", "vendor.renamed"},
		{"audit", "list", "--vendor", "not-a-uuid"}, {"audit", "list", "--limit", "0"}, {"audit", "list", "extra"}} {
		r := h.runCtl(h.env(), args...)
		checkFailure(t, r, 2, args)
		if !strings.Contains(r.stderr, "audit list [--vendor ID]") {
			t.Errorf("%q: no usage line in %q", args, r.stderr)
		}
	}
	// The admin API answers the error envelope; a token not configured is refused.
	for _, q := range []string{"action=vendor.renamed", "since=yesterday", "limit=5000", "vendor=" + v.VendorID} {
		st, body := h.adminRaw(http.MethodGet, "/admin/v1/audit?"+q, aliceToken)
		if st != http.StatusBadRequest || !strings.Contains(body, `"code":"validation_error"`) {
			t.Errorf("GET ?%s: %d %s", q, st, body)
		}
	}
	if st, body := h.adminRaw(http.MethodGet, "/admin/v1/audit", "audit-test-carol-token-0123456"); st != http.StatusUnauthorized {
		t.Errorf("an unconfigured token: %d %s", st, body)
	}

	// No admin route changes or deletes a record: every other method on
	// the list and on a record's path is refused, and the trail is as it was.
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		for _, p := range []string{"/admin/v1/audit", "/admin/v1/audit/" + all[0].ID} {
			if st, body := h.adminRaw(m, p, aliceToken); st != http.StatusMethodNotAllowed && st != http.StatusNotFound {
				t.Errorf("%s %s: %d %s", m, p, st, body)
			}
		}
	}
	if after := h.auditList("--vendor", v.VendorID); !slices.Equal(actionsOf(after), want) || after[0].ID != all[0].ID || !after[0].At.Equal(all[0].At) {
		t.Errorf("the trail changed: %q", actionsOf(after))
	}
}

// adminRaw calls the admin API with token and returns the status and body.
func (h *harness) adminRaw(method, path, token string) (int, string) {
	h.t.Helper()
	req, err := http.NewRequest(method, h.adminURL+path, strings.NewReader(`{"actor":"mallory"}`))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
