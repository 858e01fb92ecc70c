package e2e

import (
	"strings"
	"testing"
	"time"
)

// TestAuditRecordJoinsGatewayRequest: a report downloaded through the real
// gateway is one audit record in the backend, read with vendorctl audit
// list, that carries the request id the gateway answered with (the id in
// its access log), the vendor's key and the client's address.
func TestAuditRecordJoinsGatewayRequest(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	vendorID, key := s.newVendor("sandbox", "mvr")
	var keys []struct {
		KeyID string `json:"key_id"`
	}
	decode(t, s.mustVendorctl("-o", "json", "key", "list", vendorID), &keys)
	o := s.poll(key, s.place(key, "D1234567", "mvr").OrderID, 10*time.Second, func(o order) bool { return o.Final })
	if len(o.Services) != 1 || o.Services[0].FileURL == nil || len(keys) != 1 {
		t.Fatalf("order %+v, keys %+v", o, keys)
	}
	pdf := s.do("GET", *o.Services[0].FileURL, key, nil, nil)
	rid := pdf.header.Get("X-Request-Id")
	if pdf.status != 200 || rid == "" {
		t.Fatalf("report: %d, X-Request-Id %q", pdf.status, rid)
	}
	var recs []struct {
		Actor     string  `json:"actor"`
		Action    string  `json:"action"`
		VendorID  *string `json:"vendor_id"`
		KeyID     *string `json:"key_id"`
		OrderID   *string `json:"order_id"`
		Service   *string `json:"service"`
		Address   string  `json:"address"`
		RequestID *string `json:"request_id"`
	}
	decode(t, s.mustVendorctl("-o", "json", "audit", "list", "--order", o.OrderID), &recs)
	if len(recs) != 1 {
		t.Fatalf("records of order %s: %+v", o.OrderID, recs)
	}
	r := recs[0]
	if r.Actor != "vendor" || r.Action != "report.downloaded" || r.VendorID == nil || *r.VendorID != vendorID ||
		r.KeyID == nil || *r.KeyID != keys[0].KeyID || r.Service == nil || *r.Service != "mvr" || r.Address != "127.0.0.1" ||
		r.RequestID == nil || *r.RequestID != rid {
		t.Errorf("record %+v, want vendor %s key %s service mvr from 127.0.0.1 with request id %s", r, vendorID, keys[0].KeyID, rid)
	}
	if !strings.Contains(s.gateways[0].logText(), rid) {
		t.Errorf("the gateway's log has no line with request id %s", rid)
	}
}
