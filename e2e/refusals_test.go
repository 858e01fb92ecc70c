package e2e

import (
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"vendorgate/gateway/openapi"
)

// TestEachRouteDocumentsItsRefusals drives every 403 each vendor route can
// answer (an account not approved, a suspended one, an order for a service
// the account lacks) and holds the document to what was seen, both ways:
// every answer is validated against the document (its code named in the
// route's response), and each route's 403 names exactly the codes seen on
// it. A suspended vendor reads (GET /me answers 200), so account_suspended
// belongs to order placement alone.
func TestEachRouteDocumentsItsRefusals(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	gw := s.gwURLs[0] + "/api/vendor/v1"

	var pending struct {
		VendorID string `json:"vendor_id"`
	}
	decode(t, s.mustVendorctl("-o", "json", "vendor", "create", "--company", "Pending Co", "--environment", "sandbox", "--services", "mvr"), &pending)
	pendingKey := s.issueKey(pending.VendorID)
	suspended, suspendedKey := s.newVendor("sandbox", "mvr")
	s.mustVendorctl("vendor", "suspend", suspended)
	_, mvrOnlyKey := s.newVendor("sandbox", "mvr")

	const order = "/orders/00000000-0000-4000-8000-000000000000"
	type probe struct {
		op, method, path, key string
		body                  []byte
		status                int
		code                  string
	}
	probes := []probe{
		{"getMe", "GET", "/me", pendingKey, nil, 403, "account_not_approved"},
		{"listOrders", "GET", "/orders", pendingKey, nil, 403, "account_not_approved"},
		{"getOrder", "GET", order, pendingKey, nil, 403, "account_not_approved"},
		{"getReport", "GET", order + "/reports/mvr", pendingKey, nil, 403, "account_not_approved"},
		{"placeOrder", "POST", "/orders", pendingKey, orderBody("D1234567", "mvr"), 403, "account_not_approved"},
		{"getMe", "GET", "/me", suspendedKey, nil, 200, ""},
		{"listOrders", "GET", "/orders", suspendedKey, nil, 200, ""},
		{"placeOrder", "POST", "/orders", suspendedKey, orderBody("D1234567", "mvr"), 403, "account_suspended"},
		{"placeOrder", "POST", "/orders", mvrOnlyKey, orderBody("D1234567", "psp"), 403, "service_not_enabled"},
	}
	seen := map[string][]string{}
	for _, p := range probes {
		var hdr map[string]string
		if p.method == "POST" {
			hdr = map[string]string{"Idempotency-Key": "refusals-" + p.code}
		}
		r := s.do(p.method, gw+p.path, p.key, p.body, hdr)
		if r.status != p.status || r.errorCode() != p.code {
			t.Errorf("%s %s: %d %q, want %d %q: %s", p.method, p.path, r.status, r.errorCode(), p.status, p.code, r.body)
		}
		if p.status == 403 && !slices.Contains(seen[p.op], p.code) {
			seen[p.op] = append(seen[p.op], p.code)
		}
	}

	doc, err := openapi3.NewLoader().LoadFromData(openapi.Document)
	if err != nil {
		t.Fatal(err)
	}
	for _, pi := range doc.Paths.Map() {
		for _, op := range pi.Operations() {
			want, ok := seen[op.OperationID]
			if !ok {
				continue
			}
			r := op.Responses.Status(403)
			if r == nil || r.Value.Description == nil {
				t.Errorf("%s: no 403 in the document", op.OperationID)
				continue
			}
			desc := *r.Value.Description
			for _, code := range []string{"account_not_approved", "account_suspended", "service_not_enabled", "permission_denied"} {
				if named := strings.Contains(desc, code); named != slices.Contains(want, code) {
					t.Errorf("%s: the document's 403 (%q) names %s: %v; the route answers it: %v", op.OperationID, desc, code, named, !named)
				}
			}
		}
	}
	if len(seen) != 5 {
		t.Errorf("403s seen on %d operations, want all 5: %v", len(seen), seen)
	}
}
