package backend

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"vendorgate/shared/wire"
)

type want struct {
	status string
	reason string
}

func checkServices(t *testing.T, o wire.Order, w map[string]want) {
	t.Helper()
	for name, sw := range w {
		s := service(o, name)
		if s.Status != sw.status || deref(s.Reason) != orNil(sw.reason) {
			t.Errorf("%s = %s/%s; want %s/%s", name, s.Status, deref(s.Reason), sw.status, orNil(sw.reason))
		}
		if s.Status == "completed" && s.CompletedAt == nil {
			t.Errorf("%s completed without completed_at", name)
		}
	}
}

func orNil(s string) string {
	if s == "" {
		return "<nil>"
	}
	return s
}

func TestSandboxScenarios(t *testing.T) {
	h := start(t)
	v := h.newVendor("sandbox", allServices...)
	c := want{status: "completed"}
	cases := []struct {
		license  string
		status   string
		final    bool
		services map[string]want
		score    []string // reports_used; nil: safety_score null
	}{
		{"D1234567", "completed", true, map[string]want{"mvr": c, "psp": c, "cdlis": c, "driver_reviews": c}, []string{"mvr", "psp"}},
		{"D0001", "partially_completed", true, map[string]want{"mvr": {"failed", "no_record"}, "psp": c, "cdlis": c, "driver_reviews": c}, []string{"psp"}},
		{"D0002", "under_review", false, map[string]want{"mvr": {"under_review", "identity_review"}, "psp": c}, nil},
		{"D0003", "under_review", false, map[string]want{"mvr": {"under_review", "manual_review"}, "psp": c}, nil},
		{"D0004", "under_review", false, map[string]want{"mvr": c, "psp": {"under_review", "report_review"}}, nil},
		{"D0005", "failed", true, map[string]want{"mvr": {"failed", "provider_failed"}, "psp": {"failed", "provider_failed"}, "cdlis": {"failed", "provider_failed"}, "driver_reviews": {"failed", "provider_failed"}}, nil},
		{"D0006", "processing", false, map[string]want{"mvr": {"processing", "report_unavailable"}, "psp": {"processing", "report_unavailable"}, "cdlis": {"processing", "report_unavailable"}, "driver_reviews": c}, nil},
		{"D0008", "completed", true, map[string]want{"driver_reviews": c}, []string{"mvr", "psp"}},
	}
	for _, tc := range cases {
		t.Run(tc.license, func(t *testing.T) {
			o := h.mustPlace(v, tc.license)
			o = h.step(v, o.OrderID)
			if o.Status != tc.status || o.Final != tc.final {
				t.Fatalf("order %s final %v; want %s %v: %+v", o.Status, o.Final, tc.status, tc.final, o)
			}
			checkServices(t, o, tc.services)
			if tc.score == nil && o.SafetyScore != nil {
				t.Errorf("safety_score = %+v; want null", o.SafetyScore)
			}
			if tc.score != nil {
				s := o.SafetyScore
				if s == nil || strings.Join(s.ReportsUsed, ",") != strings.Join(tc.score, ",") || s.Score < 0 || s.Score > 100 ||
					s.Grade == nil || !strings.Contains("ABCDF", *s.Grade) || s.RiskLevel == nil || s.CalculatedAt == nil {
					t.Errorf("safety_score = %+v; want reports_used %v", s, tc.score)
				}
			}
			for _, e := range o.Services {
				hasFile := e.FileURL != nil
				if wantFile := e.Status == "completed" && wire.HasReport(e.Service) && tc.license != "D0002"; hasFile != wantFile {
					t.Errorf("%s file_url = %v", e.Service, deref(e.FileURL))
				}
			}
		})
	}

	t.Run("driver_reviews results", func(t *testing.T) {
		o := h.step(v, h.mustPlace(v, "D1234567", "driver_reviews").OrderID)
		if r := service(o, "driver_reviews").Result; r == nil || !r.Found || len(r.Reviews) != 2 || r.Reviews[0].Rating == nil {
			t.Fatalf("result = %+v", r)
		}
		if o.SafetyScore != nil {
			t.Fatal("safety_score without MVR or PSP")
		}
		o = h.step(v, h.mustPlace(v, "D0008", "driver_reviews").OrderID)
		if r := service(o, "driver_reviews").Result; r == nil || r.Found || r.Reviews == nil || len(r.Reviews) != 0 {
			t.Fatalf("0008 result = %+v", r)
		}
	})
	t.Run("0006 completes one step later", func(t *testing.T) {
		o := h.mustPlace(v, "D0006")
		o = h.step(v, o.OrderID)
		if o.Poll.AfterSeconds != 1 || o.Final {
			t.Fatalf("after step 1 = %+v", o)
		}
		o = h.step(v, o.OrderID)
		if o.Status != "completed" || !o.Final || service(o, "cdlis").Reason != nil {
			t.Fatalf("after step 2 = %+v", o)
		}
	})
	t.Run("identity review holds the whole order until release", func(t *testing.T) {
		o := h.step(v, h.mustPlace(v, "D0002").OrderID)
		if service(o, "psp").Status != "completed" || service(o, "psp").FileURL != nil || service(o, "driver_reviews").Result != nil {
			t.Fatalf("something is served during identity review: %+v", o.Services)
		}
		if r := h.vendorCall(v, "GET", "/api/vendor/v1/orders/"+o.OrderID+"/reports/psp", nil, ""); r.status != 404 {
			t.Fatalf("report during identity review: %d", r.status)
		}
		if o.Poll.AfterSeconds != 60 {
			t.Fatalf("held order after_seconds = %d", o.Poll.AfterSeconds)
		}
		r := h.adminCall("POST", "/admin/v1/orders/"+o.OrderID+"/release", `{"service":"mvr"}`)
		var ans struct {
			VendorID string     `json:"vendor_id"`
			Order    wire.Order `json:"order"`
		}
		h.decode(r, 200, &ans)
		if ans.VendorID != v || ans.Order.Status != "completed" || !ans.Order.Final || service(ans.Order, "mvr").FileURL == nil ||
			service(ans.Order, "psp").FileURL == nil || ans.Order.SafetyScore == nil || service(ans.Order, "driver_reviews").Result == nil {
			t.Fatalf("released = %s", r.body)
		}
		if r := h.vendorCall(v, "GET", "/api/vendor/v1/orders/"+o.OrderID+"/reports/mvr", nil, ""); r.status != 200 {
			t.Fatalf("released mvr report: %d", r.status)
		}
		if r := h.adminCall("POST", "/admin/v1/orders/"+o.OrderID+"/release", ""); r.status != 409 || r.code() != "not_held" {
			t.Fatalf("second release: %d %s", r.status, r.body)
		}
	})
	t.Run("release every held service", func(t *testing.T) {
		o := h.step(v, h.mustPlace(v, "D0004").OrderID)
		if r := h.adminCall("POST", "/admin/v1/orders/"+o.OrderID+"/release", `{"service":"mvr"}`); r.status != 409 {
			t.Fatalf("release a service that is not held: %d %s", r.status, r.body)
		}
		if r := h.adminCall("POST", "/admin/v1/orders/"+o.OrderID+"/release", `{"service":"xray"}`); r.status != 400 {
			t.Fatalf("release an unknown service: %d %s", r.status, r.body)
		}
		h.adminCall("POST", "/admin/v1/orders/"+o.OrderID+"/release", "")
		o = h.get(v, o.OrderID)
		if o.Status != "completed" || service(o, "psp").FileURL == nil || o.SafetyScore == nil {
			t.Fatalf("released = %+v", o)
		}
	})
	t.Run("a failed MVR scores from the PSP alone", func(t *testing.T) {
		o := h.step(v, h.mustPlace(v, "D0001", "mvr").OrderID)
		if o.Status != "failed" || o.SafetyScore != nil {
			t.Fatalf("mvr only, failed = %+v", o)
		}
	})
	t.Run("manual review of the MVR hides the score even when PSP is done", func(t *testing.T) {
		o := h.step(v, h.mustPlace(v, "D0003", "mvr", "psp").OrderID)
		if service(o, "psp").Status != "completed" || o.SafetyScore != nil {
			t.Fatalf("= %+v", o)
		}
	})
}

func TestDeadlineClosesOrders(t *testing.T) {
	h := start(t, func(o *Options) { o.Config.OrderDeadline = time.Hour })
	v := h.newVendor("sandbox", allServices...)
	lv := h.newVendor("live", allServices...)
	stalled := h.mustPlace(v, "D0007")
	identity := h.step(v, h.mustPlace(v, "D0002", "mvr", "psp").OrderID)
	manual := h.step(v, h.mustPlace(v, "D0003", "mvr", "psp").OrderID)
	live := h.mustPlace(lv, "D1", "mvr", "driver_reviews")
	done := h.step(v, h.mustPlace(v, "D1234567", "mvr").OrderID)

	// 0007: steps come and go, nothing finishes.
	for range 10 {
		h.clock.Advance(testDelay)
		h.runSandbox()
	}
	if o := h.get(v, stalled.OrderID); o.Status != "processing" || o.Poll.AfterSeconds != 60 {
		t.Fatalf("0007 order = %+v", o)
	}
	// Poll never points past the deadline.
	h.clock.Advance(time.Hour - 13*testDelay - 5*time.Second) // the stalled order was placed 13 steps ago
	if o := h.get(v, stalled.OrderID); o.Poll.AfterSeconds != 5 {
		t.Fatalf("after_seconds near the deadline = %d; want 5", o.Poll.AfterSeconds)
	}
	h.clock.Advance(5 * time.Second)

	o := h.eventually(v, stalled.OrderID, func(o wire.Order) bool { return o.Final })
	if o.Status != "failed" {
		t.Fatalf("stalled = %s", o.Status)
	}
	checkServices(t, o, map[string]want{"mvr": {"failed", "timed_out"}, "psp": {"failed", "timed_out"}, "driver_reviews": {"failed", "timed_out"}})
	h.clock.Advance(5 * testDelay) // past the later orders' deadlines too
	o = h.eventually(v, identity.OrderID, func(o wire.Order) bool { return o.Final })
	checkServices(t, o, map[string]want{"mvr": {"failed", "identity_unverified"}, "psp": {status: "completed"}})
	if o.Status != "partially_completed" || o.SafetyScore == nil || strings.Join(o.SafetyScore.ReportsUsed, ",") != "psp" {
		t.Fatalf("identity order at the deadline = %+v", o)
	}
	o = h.eventually(v, manual.OrderID, func(o wire.Order) bool { return o.Final })
	checkServices(t, o, map[string]want{"mvr": {"failed", "timed_out"}})
	o = h.eventually(lv, live.OrderID, func(o wire.Order) bool { return o.Final })
	checkServices(t, o, map[string]want{"mvr": {"failed", "timed_out"}, "driver_reviews": {"failed", "timed_out"}})
	if o := h.get(v, done.OrderID); o.Status != "completed" {
		t.Fatalf("a finished order was touched: %+v", o)
	}

	// A result after the deadline is recorded nowhere.
	for _, body := range []string{`{"service":"mvr"}`, `{"service":"driver_reviews"}`} {
		r := h.adminCall("POST", "/admin/v1/orders/"+live.OrderID+"/complete", body)
		if r.status != 409 || r.code() != "request_failed" {
			t.Fatalf("late result: %d %s", r.status, r.body)
		}
	}
	if r := h.adminCall("POST", "/admin/v1/orders/"+identity.OrderID+"/release", ""); r.status != 409 {
		t.Fatalf("late release: %d %s", r.status, r.body)
	}
	if o := h.get(lv, live.OrderID); o.Status != "failed" {
		t.Fatalf("late result reopened the order: %+v", o)
	}
	metrics := string(h.do("GET", h.admin+"/metrics", nil, "").body)
	if !strings.Contains(metrics, "vendorgate_backend_sweeper_orders_closed_total 4") {
		t.Errorf("sweeper metrics:\n%s", grep(metrics, "sweeper"))
	}
}

func TestLateSandboxStepDoesNotFinishAClosedOrder(t *testing.T) {
	// The sweeper is slow here: the simulator's due step arrives after the
	// deadline and must close the order instead of completing it.
	h := start(t, func(o *Options) { o.Config.OrderDeadline = 2 * testDelay; o.Config.SweepInterval = time.Hour })
	v := h.newVendor("sandbox", allServices...)
	o := h.mustPlace(v, "D1234567", "mvr")
	h.clock.Advance(3 * testDelay)
	o = h.eventually(v, o.OrderID, func(o wire.Order) bool { return o.Final })
	checkServices(t, o, map[string]want{"mvr": {"failed", "timed_out"}})
}

func grep(text, word string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, word) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestLiveOrdersWaitForStaff(t *testing.T) {
	h := start(t)
	lv := h.newVendor("live", allServices...)
	o := h.mustPlace(lv, "D1234567")
	h.clock.Advance(10 * testDelay)
	h.runSandbox()
	if o := h.get(lv, o.OrderID); o.Status != "processing" || o.Poll.AfterSeconds != 60 {
		t.Fatalf("live order moved on its own: %+v", o)
	}
	path := "/admin/v1/orders/" + o.OrderID
	pdf := []byte("%PDF-1.4\nstaff report\n%%EOF\n")
	r := h.adminCall("POST", path+"/complete", `{"service":"mvr","report_pdf_base64":"`+base64.StdEncoding.EncodeToString(pdf)+`"}`)
	if r.status != 200 {
		t.Fatalf("complete mvr: %d %s", r.status, r.body)
	}
	r = h.vendorCall(lv, "GET", "/api/vendor/v1/orders/"+o.OrderID+"/reports/mvr", nil, "")
	if r.status != 200 || !bytes.Equal(r.body, pdf) || r.header.Get("Content-Type") != "application/pdf" {
		t.Fatalf("staff report: %d %q", r.status, r.body)
	}
	r = h.adminCall("POST", path+"/complete", `{"service":"driver_reviews","result":{"found":true,"reviews":[{"rating":5,"text":"good","date":"2025-01-02"}]}}`)
	if r.status != 200 {
		t.Fatalf("complete driver_reviews: %d %s", r.status, r.body)
	}
	h.adminCall("POST", path+"/complete", `{"service":"cdlis"}`) // generated PDF
	r = h.adminCall("POST", path+"/fail", `{"service":"psp","reason":"no_record"}`)
	var ans struct {
		VendorID string     `json:"vendor_id"`
		Order    wire.Order `json:"order"`
	}
	h.decode(r, 200, &ans)
	got := ans.Order
	if ans.VendorID != lv || got.Status != "partially_completed" || !got.Final {
		t.Fatalf("after staff = %s", r.body)
	}
	checkServices(t, got, map[string]want{"mvr": {status: "completed"}, "psp": {"failed", "no_record"}, "cdlis": {status: "completed"}, "driver_reviews": {status: "completed"}})
	if res := service(got, "driver_reviews").Result; res == nil || len(res.Reviews) != 1 || *res.Reviews[0].Text != "good" {
		t.Fatalf("driver_reviews result = %+v", res)
	}
	if got.SafetyScore == nil || strings.Join(got.SafetyScore.ReportsUsed, ",") != "mvr" {
		t.Fatalf("safety_score = %+v", got.SafetyScore)
	}
	if r := h.vendorCall(lv, "GET", "/api/vendor/v1/orders/"+o.OrderID+"/reports/cdlis", nil, ""); r.status != 200 || !bytes.HasPrefix(r.body, []byte("%PDF-")) {
		t.Fatalf("generated cdlis report: %d", r.status)
	}
	var adminView struct {
		VendorID string     `json:"vendor_id"`
		Order    wire.Order `json:"order"`
	}
	h.decode(h.adminCall("GET", path, ""), 200, &adminView)
	if adminView.VendorID != lv || adminView.Order.OrderID != o.OrderID {
		t.Fatalf("admin get = %+v", adminView)
	}

	refusals := []struct {
		method, path, body string
		status             int
	}{
		{"POST", path + "/complete", `{"service":"mvr"}`, 409}, // already final
		{"POST", path + "/fail", `{"service":"mvr","reason":"provider_failed"}`, 409},
		{"POST", path + "/fail", `{"service":"mvr","reason":"bored"}`, 400},
		{"POST", path + "/complete", `{"service":"xray"}`, 400},
		{"POST", path + "/complete", `{}`, 400},
		{"POST", path + "/complete", `{"service":"driver_reviews","report_pdf_base64":"JVBERi0="}`, 400},
		{"POST", path + "/complete", `{"service":"mvr","report_pdf_base64":"bm90IGEgcGRm"}`, 400},
		{"POST", path + "/complete", `{"service":"mvr","result":{"found":false,"reviews":[]}}`, 400},
		{"POST", path + "/complete", `{"service":"driver_reviews","result":{"found":true,"reviews":[{"rating":1,"text":null,"date":"May 5"}]}}`, 400},
		{"GET", "/admin/v1/orders/6f1c1c7e-1111-4d2a-9c77-0123456789ab", "", 404},
		{"POST", "/admin/v1/orders/nope/complete", `{"service":"mvr"}`, 404},
	}
	for _, rf := range refusals {
		if r := h.adminCall(rf.method, rf.path, rf.body); r.status != rf.status {
			t.Errorf("%s %s %s: %d %s; want %d", rf.method, rf.path, rf.body, r.status, r.body, rf.status)
		}
	}
}

func TestDeleteOrder(t *testing.T) {
	h := start(t)
	v := h.newVendor("sandbox", allServices...)
	o := h.step(v, h.mustPlace(v, "D0003").OrderID) // mvr held, the rest completed
	dir := filepath.Join(h.o.Config.ReportsDir, o.OrderID)
	if _, err := os.Stat(filepath.Join(dir, "psp.pdf")); err != nil {
		t.Fatalf("report file: %v", err)
	}
	var ans struct {
		Order wire.Order `json:"order"`
	}
	h.decode(h.adminCall("DELETE", "/admin/v1/orders/"+o.OrderID, ""), 200, &ans)
	got := ans.Order
	checkServices(t, got, map[string]want{"mvr": {"failed", "record_deleted"}, "psp": {status: "completed"}})
	if !got.Final || service(got, "psp").FileURL != nil || service(got, "driver_reviews").Result != nil {
		t.Fatalf("deleted order still serves data: %+v", got)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("report files remain: %v", err)
	}
	if r := h.vendorCall(v, "GET", "/api/vendor/v1/orders/"+o.OrderID+"/reports/psp", nil, ""); r.status != 404 {
		t.Fatalf("report of a deleted order: %d", r.status)
	}
}

func TestReportDownload(t *testing.T) {
	h := start(t)
	v := h.newVendor("sandbox", allServices...)
	o := h.mustPlace(v, "D1234567")
	base := "/api/vendor/v1/orders/" + o.OrderID + "/reports/"
	if r := h.vendorCall(v, "GET", base+"mvr", nil, ""); r.status != 404 || r.code() != "not_found" {
		t.Fatalf("before completion: %d %s", r.status, r.body)
	}
	o = h.step(v, o.OrderID)
	for _, svc := range []string{"mvr", "psp", "cdlis"} {
		if fu := service(o, svc).FileURL; fu == nil || *fu != testPublicURL+base+svc {
			t.Fatalf("%s file_url = %s", svc, deref(fu))
		}
		r := h.vendorCall(v, "GET", base+svc, nil, "")
		if r.status != 200 || r.header.Get("Content-Type") != "application/pdf" || r.header.Get("Cache-Control") != "no-store" ||
			!bytes.HasPrefix(r.body, []byte("%PDF-")) || !bytes.Contains(r.body, []byte("%%EOF")) {
			t.Fatalf("%s report: %d %v %q", svc, r.status, r.header, r.body[:min(20, len(r.body))])
		}
	}
	for _, svc := range []string{"driver_reviews", "xray"} {
		if r := h.vendorCall(v, "GET", base+svc, nil, ""); r.status != 404 || r.code() != "not_found" {
			t.Fatalf("%s: %d", svc, r.status)
		}
	}
	// A file gone from disk answers 404, not 500.
	os.Remove(filepath.Join(h.o.Config.ReportsDir, o.OrderID, "cdlis.pdf"))
	if r := h.vendorCall(v, "GET", base+"cdlis", nil, ""); r.status != 404 {
		t.Fatalf("missing file: %d", r.status)
	}
}
