package main

import (
	"strings"
	"testing"

	"vendorgate/cmd/vendorctl/internal/view"
	"vendorgate/shared/sandboxvalues"
	"vendorgate/shared/wire"
)

// TestOrderQueueAgainstBackend: an operator finds the held orders with
// `order list` alone (why each is held, how old, how long until the
// deadline), narrows by reason and vendor, and releases one.
func TestOrderQueueAgainstBackend(t *testing.T) {
	h := startBackend(t)
	v := decodeInto[view.Vendor](t, h.ctl("-o", "json", "vendor", "create", "--company", "Queue Co", "--environment", "sandbox",
		"--services", "mvr,psp"))
	h.ctl("vendor", "approve", v.VendorID)
	reasons := map[string]string{}
	for suffix, reason := range map[string]string{sandboxvalues.IdentityReview: wire.ReasonIdentityReview,
		sandboxvalues.ManualReview: wire.ReasonManualReview, sandboxvalues.ReportReview: wire.ReasonReportReview} {
		id := h.placeOrder(v.VendorID, "D123"+suffix, "mvr", "psp")
		h.waitFor(id, reason, func(o wire.Order) bool { return o.Status == wire.StatusUnderReview })
		reasons[id] = reason
	}
	done := h.placeOrder(v.VendorID, "D1239999", "mvr")
	h.waitFor(done, "final", func(o wire.Order) bool { return o.Final })

	out := h.ctl("order", "list", "--status", "under_review")
	if !strings.HasPrefix(out, "ORDER ID") || !strings.Contains(lineWith(out, "ORDER ID"), "DEADLINE IN") {
		t.Fatalf("order list table has no header:\n%s", out)
	}
	for id, reason := range reasons {
		row := fields(lineWith(out, id))
		// ORDER VENDOR COMPANY(Queue Co) STATUS HELD(service reason) PLACED(age ago) DEADLINE
		if len(row) != 10 || row[1] != v.VendorID || row[2]+" "+row[3] != "Queue Co" || row[4] != wire.StatusUnderReview || row[6] != reason ||
			row[8] != "ago" || !strings.HasPrefix(row[9], "1d23h") {
			t.Errorf("row of %s (held for %s): %q\n%s", id, reason, row, out)
		}
	}
	if strings.Contains(out, done) {
		t.Errorf("a completed order is in the under_review list:\n%s", out)
	}

	q := decodeInto[view.OrderQueue](t, h.ctl("-o", "json", "order", "list", "--reason", "manual_review", "--vendor", v.VendorID, "--since", "1h"))
	if len(q.Orders) != 1 || reasons[q.Orders[0].Order.OrderID] != wire.ReasonManualReview {
		t.Fatalf("--reason manual_review: %+v", q.Orders)
	}
	manual := q.Orders[0].Order.OrderID
	h.ctl("order", "release", manual)
	after := h.ctl("order", "list", "--status", "under_review")
	if strings.Contains(after, manual) || len(strings.Split(strings.TrimSpace(after), "\n")) != 3 {
		t.Errorf("after releasing %s the queue is:\n%s", manual, after)
	}
	if out := h.ctl("order", "list", "--since", "2030-01-01T00:00:00Z"); strings.TrimSpace(out) != "No orders." {
		t.Errorf("nothing since 2030: %q", out)
	}

	for _, args := range [][]string{
		{"--status", "held"}, {"--reason", "report_unavailable"}, {"--vendor", "1234"},
		{"--since", "yesterday"}, {"--since", "-5h"}, {"--limit", "0"}, {"--limit", "+5"},
	} {
		line := h.ctlFails(2, append([]string{"order", "list"}, args...)...)
		if !strings.HasPrefix(line, "vendorctl: "+args[0]+" ") {
			t.Errorf("order list %v: %q does not name %s", args, line, args[0])
		}
	}
}
