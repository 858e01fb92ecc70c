package backend

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"vendorgate/backend/audit"
	"vendorgate/shared/testlog"
)

// auditActions lists GET /admin/v1/audit?query as "actor action vendor".
func (h *harness) auditActions(query string) []string {
	h.t.Helper()
	var page struct {
		Records []audit.Record `json:"records"`
	}
	h.decode(h.adminCall("GET", "/admin/v1/audit?"+query, ""), 200, &page)
	var out []string
	for _, r := range page.Records {
		v := ""
		if r.VendorID != nil {
			v = *r.VendorID
		}
		out = append(out, r.Actor+" "+r.Action+" "+v)
	}
	return out
}

func (h *harness) createVendor(name string) string {
	h.t.Helper()
	var v struct {
		VendorID string `json:"vendor_id"`
	}
	h.decode(h.adminCall("POST", "/admin/v1/vendors", fmt.Sprintf(`{"company_name":%q,"environment":"sandbox","enabled_services":["mvr"]}`, name)), 201, &v)
	return v.VendorID
}

// TestAuditRetentionDeletesOnlyOlderRecords: records older than
// audit_retention are deleted by the sweep (which runs at start), younger
// ones are kept.
func TestAuditRetentionDeletesOnlyOlderRecords(t *testing.T) {
	h := start(t, func(o *Options) { o.Config.AuditRetention = 48 * time.Hour })
	old := h.createVendor("Old Co")
	h.clock.Advance(30 * time.Hour)
	young := h.createVendor("Young Co")
	h.restart() // the sweep: both are within 48h
	if got := h.auditActions(""); len(got) != 2 {
		t.Fatalf("within the retention: %q, want both records", got)
	}
	h.clock.Advance(20 * time.Hour) // old is 50h old, young 20h
	h.restart()
	got := h.auditActions("")
	if len(got) != 1 || got[0] != "admin vendor.created "+young {
		t.Fatalf("after the sweep: %q, want only %s's record (not %s's)", got, young, old)
	}
}

// TestAuditRecordsScheduledRevocation: the revocation at the end of a
// rotation's overlap, made by the backend, is recorded as the system's.
func TestAuditRecordsScheduledRevocation(t *testing.T) {
	h := start(t)
	v := h.newVendor("sandbox", "mvr")
	var k struct {
		KeyID string `json:"key_id"`
	}
	h.decode(h.adminCall("POST", "/admin/v1/vendors/"+v+"/keys", ""), 201, &k)
	h.decode(h.adminCall("POST", "/admin/v1/keys/"+k.KeyID+"/rotate", `{"overlap_seconds":3600}`), 201, &json.RawMessage{})
	h.clock.Advance(2 * time.Hour)
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := h.auditActions("action=key.revoked_scheduled")
		if len(got) == 1 && got[0] == "system key.revoked_scheduled "+v {
			break
		}
		if len(got) > 1 || time.Now().After(deadline) {
			t.Fatalf("scheduled revocation records: %q", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAuditWriteFailure: when the database refuses audit records (here a
// trigger added to the real SQLite file), a report download is refused
// rather than served unrecorded, and an admin action, already done,
// answers as it would and logs the record it could not write.
func TestAuditWriteFailure(t *testing.T) {
	logs := &testlog.Buffer{}
	h := start(t, func(o *Options) { o.Logger = slog.New(slog.NewJSONHandler(logs, nil)) })
	lv := h.newVendor("live", "mvr")
	o := h.mustPlace(lv, "D1234567", "mvr")
	if r := h.adminCall("POST", "/admin/v1/orders/"+o.OrderID+"/complete", `{"service":"mvr"}`); r.status != 200 {
		t.Fatalf("complete mvr: %d %s", r.status, r.body)
	}
	report := "/api/vendor/v1/orders/" + o.OrderID + "/reports/mvr"
	if r := h.vendorCall(lv, "GET", report, nil, ""); r.status != 200 || !bytes.HasPrefix(r.body, []byte("%PDF-")) {
		t.Fatalf("report before: %d", r.status)
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(h.dir, "db", "vg.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("CREATE TRIGGER refuse_audit BEFORE INSERT ON audit_log BEGIN SELECT RAISE(ABORT, 'disk says no'); END"); err != nil {
		t.Fatal(err)
	}
	if r := h.vendorCall(lv, "GET", report, nil, ""); r.status < 500 || bytes.Contains(r.body, []byte("%PDF-")) {
		t.Errorf("report with no audit record possible: %d, %d bytes, want a 5xx envelope and no PDF", r.status, len(r.body))
	}
	if r := h.adminCall("POST", "/admin/v1/vendors/"+lv+"/suspend", ""); r.status != 200 {
		t.Fatalf("suspend: %d %s", r.status, r.body)
	}
	logs.WaitFor(func(s string) bool { return strings.Contains(s, `"action":"vendor.suspended"`) })
	line := ""
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"msg":"audit record not written"`) && strings.Contains(l, `"action":"vendor.suspended"`) {
			line = l
		}
	}
	if !strings.Contains(line, `"vendor_id":"`+lv+`"`) || !strings.Contains(line, `"actor":"admin"`) {
		t.Errorf("log of the unwritten record: %s", line)
	}
}

// TestAuditRequestIDOfAdminActions: an admin action's record carries the
// X-Request-Id the client sent; when it sent none, the backend makes one
// and answers with it, so the record can be named.
func TestAuditRequestIDOfAdminActions(t *testing.T) {
	h := start(t)
	r := h.adminCall("POST", "/admin/v1/vendors", `{"company_name":"No Id Co","environment":"sandbox","enabled_services":["mvr"]}`)
	made := r.header.Get("X-Request-Id")
	if r.status != 201 || made == "" {
		t.Fatalf("create with no X-Request-Id: %d, answered X-Request-Id %q", r.status, made)
	}
	r = h.do("POST", h.admin+"/admin/v1/vendors", map[string]string{"Authorization": "Bearer " + testAdminToken, "X-Request-Id": "ops-rid-7"},
		`{"company_name":"Id Co","environment":"sandbox","enabled_services":["mvr"]}`)
	if r.status != 201 {
		t.Fatalf("create with X-Request-Id: %d %s", r.status, r.body)
	}
	var page struct {
		Records []audit.Record `json:"records"`
	}
	h.decode(h.adminCall("GET", "/admin/v1/audit?action=vendor.created", ""), 200, &page)
	if len(page.Records) != 2 || page.Records[0].RequestID == nil || *page.Records[0].RequestID != "ops-rid-7" ||
		page.Records[1].RequestID == nil || *page.Records[1].RequestID != made {
		t.Fatalf("records %+v, want request ids ops-rid-7 then %s", page.Records, made)
	}
}
