package apierr

import (
	"encoding/json"
	"net/http"
	"testing"
)

func TestStatusTable(t *testing.T) {
	want := map[Code]int{
		"validation_error": 400, "invalid_api_key": 401, "api_key_expired": 401,
		"account_not_approved": 403, "account_suspended": 403, "service_not_enabled": 403,
		"permission_denied": 403, "not_found": 404, "method_not_allowed": 405,
		"idempotency_conflict": 409, "in_progress": 409, "payload_too_large": 413,
		"unsupported_media_type": 415, "mvr_state_unavailable": 422, "rate_limited": 429,
		"internal_error": 500, "rate_limit_unavailable": 503, "price_unavailable": 503,
		"request_failed": 502,
	}
	if len(Codes()) != len(want) {
		t.Fatalf("Codes() has %d codes, the specification %d", len(Codes()), len(want))
	}
	for _, c := range Codes() {
		if got := c.Status(); got != want[c] {
			t.Errorf("%s: status %d, want %d", c, got, want[c])
		}
	}
	if Code("nope").Known() || Code("nope").Status() != 500 {
		t.Error("an unknown code must not be known and must map to 500")
	}
}

func TestEnvelopeShape(t *testing.T) {
	cases := []struct {
		name string
		err  *Error
		want string
	}{
		{"plain", New(NotFound, "no such order"),
			`{"error":{"code":"not_found","message":"no such order","fields":null}}`},
		{"fields", &Error{Code: ValidationError, Message: "invalid", Fields: map[string]string{"mc_number": "required"}},
			`{"error":{"code":"validation_error","message":"invalid","fields":{"mc_number":"required"}}}`},
		{"order id", &Error{Code: IdempotencyConflict, Message: "used", OrderID: "6f1c0f4e-0000-4000-8000-000000000000"},
			`{"error":{"code":"idempotency_conflict","message":"used","fields":null,"order_id":"6f1c0f4e-0000-4000-8000-000000000000"}}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(tc.err.Body()); got != tc.want {
				t.Errorf("body\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestErrorStatusOverride(t *testing.T) {
	e := &Error{Code: RequestFailed, Message: "timeout", HTTPStatus: http.StatusGatewayTimeout}
	if e.Status() != 504 {
		t.Fatalf("status %d, want 504", e.Status())
	}
}

func TestParse(t *testing.T) {
	good := New(RateLimited, "slow down").Body()
	d, ok := Parse(good)
	if !ok || d.Code != RateLimited || d.Message != "slow down" {
		t.Fatalf("Parse(%s) = %+v, %v", good, d, ok)
	}
	for _, bad := range []string{``, `nope`, `{}`, `{"error":"x"}`, `{"error":{"code":"weird","message":"m"}}`,
		`{"error":{"code":"not_found"}}`, `<html>502</html>`} {
		if _, ok := Parse([]byte(bad)); ok {
			t.Errorf("Parse(%q) accepted a body that is not an envelope", bad)
		}
	}
	var env map[string]map[string]any
	if err := json.Unmarshal(good, &env); err != nil {
		t.Fatal(err)
	}
	if _, has := env["error"]["fields"]; !has {
		t.Error("fields must be present (null) in every envelope")
	}
}
