package e2e

import (
	"strings"
	"testing"
	"time"

	"vendorgate/shared/sandboxvalues"
)

// rowsHeldFor is the rows of an `order list` table whose HELD column names
// reason.
func rowsHeldFor(table, reason string) [][]string {
	var out [][]string
	for _, l := range strings.Split(table, "\n") {
		f := strings.Fields(l)
		// ORDER VENDOR COMPANY(Acme sandbox: two words) STATUS HELD(service reason) ...
		if len(f) >= 7 && f[6] == reason {
			out = append(out, f)
		}
	}
	return out
}

// TestOperatorFindsAndReleasesHeldOrder: a vendor places sandbox orders
// through the gateway that the simulated provider holds for review; the
// operator, with no order id from the vendor, finds them with `vendorctl
// order list`, sees why each is held and when its deadline closes it,
// releases one, and the vendor's next poll shows it completed.
func TestOperatorFindsAndReleasesHeldOrder(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	vendorID, key := s.newVendor("sandbox", "mvr,psp")
	for _, suffix := range []string{sandboxvalues.IdentityReview, sandboxvalues.ManualReview, sandboxvalues.ReportReview, "9999"} {
		s.place(key, "D123"+suffix, "mvr", "psp")
	}

	var table string
	deadline := time.Now().Add(15 * time.Second)
	for {
		table = s.mustVendorctl("order", "list", "--status", "under_review", "--since", "1h")
		if len(strings.Split(strings.TrimSpace(table), "\n")) == 4 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, reason := range []string{"identity_review", "manual_review", "report_review"} {
		rows := rowsHeldFor(table, reason)
		if len(rows) != 1 || rows[0][1] != vendorID || rows[0][2]+" "+rows[0][3] != "Acme sandbox" || rows[0][4] != "under_review" || !strings.HasPrefix(rows[0][9], "1d23h") {
			t.Fatalf("held for %s: rows %q in\n%s", reason, rows, table)
		}
	}
	t.Logf("vendorctl order list --status under_review:\n%s", table)

	manual := rowsHeldFor(s.mustVendorctl("order", "list", "--reason", "manual_review", "--vendor", vendorID), "manual_review")
	if len(manual) != 1 {
		t.Fatalf("--reason manual_review: %q", manual)
	}
	id := manual[0][0]
	s.mustVendorctl("order", "release", id)
	o := s.poll(key, id, 10*time.Second, func(o order) bool { return o.Final })
	if o.Status != "completed" {
		t.Errorf("released order: %+v", o)
	}
	if rest := s.mustVendorctl("order", "list", "--status", "under_review"); strings.Contains(rest, id) || len(rowsHeldFor(rest, "manual_review")) != 0 {
		t.Errorf("the released order is still in the queue:\n%s", rest)
	}
}
