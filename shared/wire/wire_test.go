package wire

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

// An order carries every field, null where the specification says so: a
// client reads "safety_score": null, never a missing key.
func TestOrderNullsArePresent(t *testing.T) {
	b, err := json.Marshal(Order{OrderID: "o1", Status: StatusProcessing, Services: []ServiceEntry{{Service: MVR, Status: StatusProcessing}}})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"order_id", "status", "final", "safety_score", "environment", "mc_number", "external_reference", "services", "created_at", "poll"} {
		if _, ok := m[k]; !ok {
			t.Errorf("order JSON lacks %q: %s", k, b)
		}
	}
	if m["safety_score"] != nil || m["external_reference"] != nil {
		t.Errorf("unset safety_score or external_reference not null: %s", b)
	}
	svc := m["services"].([]any)[0].(map[string]any)
	for _, k := range []string{"service", "status", "reason", "state", "completed_at", "file_url", "result"} {
		if v, ok := svc[k]; !ok || (k != "service" && k != "status" && v != nil) {
			t.Errorf("service entry %q: %v (present %v) in %s", k, v, ok, b)
		}
	}
}

// The key resolution travels from the backend to the gateway as JSON and
// comes back the same, a revocation included.
func TestKeyResolutionRoundTrip(t *testing.T) {
	now := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	revoked := now.Add(time.Hour)
	in := KeyResolution{KeyID: "k1", VendorID: "v1", Environment: "sandbox", CreatedAt: now, ExpiresAt: now.Add(90 * 24 * time.Hour),
		RevokedAt: &revoked, Vendor: VendorInfo{Status: VendorApproved, CompanyName: "Acme", EnabledServices: []string{MVR, PSP}}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out KeyResolution
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip:\n in %+v\nout %+v", in, out)
	}
	if !strings.Contains(string(b), `"revoked_at":"2026-11-24T11:00:00Z"`) {
		t.Fatalf("revoked_at not as the contract names it: %s", b)
	}
}

// An invalidation names one thing; the other field is left out.
func TestInvalidationOmitsTheOther(t *testing.T) {
	for in, want := range map[Invalidation]string{
		{KeyHash: "ab"}:  `{"key_hash":"ab"}`,
		{VendorID: "v1"}: `{"vendor_id":"v1"}`,
	} {
		b, _ := json.Marshal(in)
		if string(b) != want {
			t.Errorf("%+v = %s, want %s", in, b, want)
		}
	}
}

// Services, IsService and HasReport agree: every listed service is one,
// driver_reviews alone has no PDF, and nothing else is a service.
func TestServices(t *testing.T) {
	want := []string{"mvr", "psp", "cdlis", "driver_reviews"}
	if got := Services(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Services() = %v, want the specification's order %v", got, want)
	}
	for _, s := range Services() {
		if !IsService(s) {
			t.Errorf("IsService(%q) false", s)
		}
		if HasReport(s) == (s == DriverReviews) {
			t.Errorf("HasReport(%q) = %v", s, HasReport(s))
		}
	}
	for _, s := range []string{"", "MVR", "reviews", "mvr "} {
		if IsService(s) || HasReport(s) {
			t.Errorf("%q taken for a service", s)
		}
	}
	Services()[0] = "changed" // a caller's copy, not the list
	if Services()[0] != MVR {
		t.Fatal("Services returns a shared slice")
	}
}

// The identity headers are the ones only the gateway sets, written as
// HTTP writes them (canonical), and never the ones a client may send.
func TestIdentityHeaders(t *testing.T) {
	got := IdentityHeaders()
	if !reflect.DeepEqual(got, []string{HeaderInternalToken, HeaderVendorID, HeaderKeyID, HeaderEnvironment}) {
		t.Fatalf("IdentityHeaders() = %v", got)
	}
	for _, h := range append(got, HeaderRequestID, HeaderForwardedFor, HeaderAPIKey, HeaderIdempotency) {
		if http.CanonicalHeaderKey(h) != h && h != HeaderAPIKey {
			t.Errorf("%q is not canonical", h)
		}
	}
	for _, h := range got {
		if h == HeaderAPIKey || h == HeaderRequestID || h == HeaderIdempotency {
			t.Errorf("%q is a client's header, not the gateway's alone", h)
		}
	}
}
