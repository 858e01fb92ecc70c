package backend

import (
	"context"
	"strings"
	"testing"

	"vendorgate/backend/store/postgres"
	"vendorgate/shared/testpg"
	"vendorgate/shared/wire"
)

// A control character (Cc) in any string of an order is a 400
// validation_error naming the field, on SQLite and on PostgreSQL (which
// refuses NUL in text and jsonb: without the check, a 500 there).
func TestControlCharactersInOrdersRefused(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { controlCharOrders(t, start(t)) })
	t.Run("postgres", func(t *testing.T) {
		srv := testpg.Start(t)
		url := srv.CreateDB(t, "ctl")
		h := start(t, func(o *Options) {
			st, err := postgres.Open(context.Background(), postgres.Options{URL: url})
			if err != nil {
				t.Fatal(err)
			}
			o.Store = st
		})
		controlCharOrders(t, h)
	})
}

func controlCharOrders(t *testing.T, h *harness) {
	v := h.newVendor("sandbox", allServices...)
	good := orderBody("D1234567")
	cases := []struct {
		name, old, new, field string
	}{
		{"NUL in mc_number", `"MC-123456"`, `"MC-123456\u0000"`, "mc_number"},
		{"NUL in external_reference", `"po-77"`, `"po\u000077"`, "external_reference"},
		{"NUL in first_name", `"Ann"`, `"A\u0000nn"`, "driver.first_name"},
		{"BEL in last_name", `"Lee"`, `"Lee\u0007"`, "driver.last_name"},
		{"newline in last_name", `"Lee"`, `"Le\ne"`, "driver.last_name"},
		{"escaped DEL in first_name", `"Ann"`, `"Ann\u007f"`, "driver.first_name"},
		{"raw DEL in first_name", `"Ann"`, "\"Ann\x7f\"", "driver.first_name"},
		{"raw C1 in first_name", `"Ann"`, "\"Ann\u0085\"", "driver.first_name"},
		{"escaped C1 in external_reference", `"po-77"`, `"po-77\u009f"`, "external_reference"},
		{"NUL in date_of_birth", `"1980-02-03"`, `"1980-02-03\u0000"`, "driver.date_of_birth"},
		{"tab in license_number", `"D1234567"`, `"D1234\t567"`, "driver.license_number"},
		{"NUL in license_state", `"TX"`, `"T\u0000X"`, "driver.license_state"},
		{"NUL in a service", `"mvr"`, `"mvr\u0000"`, "services"},
		// Bidirectional overrides and isolates reorder what a terminal or
		// a table shows (vendorctl prints these fields as they are).
		{"raw RLO in last_name", `"Lee"`, "\"Lee\u202e\"", "driver.last_name"},
		{"escaped LRE in first_name", `"Ann"`, `"\u202aAnn"`, "driver.first_name"},
		{"raw PDF in external_reference", `"po-77"`, "\"po\u202c77\"", "external_reference"},
		{"raw RLI in mc_number", `"MC-123456"`, "\"MC-\u2067123456\"", "mc_number"},
		{"escaped PDI in last_name", `"Lee"`, `"Lee\u2069"`, "driver.last_name"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := strings.Replace(good, c.old, c.new, 1)
			if body == good {
				t.Fatalf("%s not in the order body", c.old)
			}
			r := h.place(v, "ctl-"+string(rune('a'+i)), body)
			if r.status != 400 {
				t.Fatalf("%d %s, want 400", r.status, r.body)
			}
			code, fields, _ := r.envelope(t)
			if code != "validation_error" || !strings.Contains(fields[c.field], "control characters") {
				t.Fatalf("%s %v, want validation_error naming %s", code, fields, c.field)
			}
		})
	}
	t.Run("tab in Idempotency-Key", func(t *testing.T) {
		r := h.place(v, "ctl\tkey", good)
		code, fields, _ := r.envelope(t)
		if r.status != 400 || code != "validation_error" || fields[wire.HeaderIdempotency] == "" {
			t.Fatalf("%d %s", r.status, r.body)
		}
	})
	var list wire.OrderList
	h.decode(h.vendorCall(v, "GET", "/api/vendor/v1/orders", nil, ""), 200, &list)
	if len(list.Orders) != 0 {
		t.Fatalf("%d orders were placed", len(list.Orders))
	}
	// The same body without the control characters is placed.
	if r := h.place(v, "ctl-clean", good); r.status != 202 {
		t.Fatalf("clean order: %d %s", r.status, r.body)
	}
}

// A control character in any string of an admin body is a 400
// validation_error naming the field.
func TestControlCharactersInAdminBodiesRefused(t *testing.T) {
	h := start(t)
	v := h.newVendor("sandbox", allServices...)
	o := h.mustPlace(v, "D1234567")
	for _, c := range []struct {
		method, path, body, field string
	}{
		{"POST", "/admin/v1/vendors", `{"company_name":"Acme\u0000","environment":"sandbox","enabled_services":["mvr"]}`, "company_name"},
		{"POST", "/admin/v1/vendors", "{\"company_name\":\"Acme\u0085 Inc\",\"environment\":\"sandbox\",\"enabled_services\":[]}", "company_name"},
		{"POST", "/admin/v1/vendors", `{"company_name":"Acme","environment":"sand\u001bbox","enabled_services":[]}`, "environment"},
		{"POST", "/admin/v1/vendors", `{"company_name":"Acme","environment":"sandbox","enabled_services":["mvr\u0000"]}`, "enabled_services"},
		{"PUT", "/admin/v1/vendors/" + v + "/services", `{"enabled_services":["mvr","psp\u007f"]}`, "enabled_services"},
		{"POST", "/admin/v1/orders/" + o.OrderID + "/fail", `{"service":"mvr","reason":"provider\u0000down"}`, "reason"},
		{"POST", "/admin/v1/orders/" + o.OrderID + "/fail", `{"service":"mvr\u0000","reason":"down"}`, "service"},
		{"POST", "/admin/v1/orders/" + o.OrderID + "/release", `{"service":"mvr\n"}`, "service"},
		{"POST", "/admin/v1/orders/" + o.OrderID + "/complete",
			`{"service":"driver_reviews","result":{"found":true,"reviews":[{"rating":4,"text":"ok\u0000","date":"2024-01-02"}]}}`, "result.reviews.text"},
		{"POST", "/admin/v1/orders/" + o.OrderID + "/complete",
			`{"service":"driver_reviews","result":{"found":true,"reviews":[{"rating":4,"text":"ok","date":"2024-01-02\u0080"}]}}`, "result.reviews.date"},
	} {
		r := h.adminCall(c.method, c.path, c.body)
		if r.status != 400 {
			t.Errorf("%s %s %s: %d %s, want 400", c.method, c.path, c.body, r.status, r.body)
			continue
		}
		code, fields, _ := r.envelope(t)
		if code != "validation_error" || !strings.Contains(fields[c.field], "control characters") {
			t.Errorf("%s %s %s: %s %v, want validation_error naming %s", c.method, c.path, c.body, code, fields, c.field)
		}
	}
	var list struct {
		Vendors []struct {
			CompanyName string `json:"company_name"`
		} `json:"vendors"`
	}
	h.decode(h.adminCall("GET", "/admin/v1/vendors", ""), 200, &list)
	if len(list.Vendors) != 1 {
		t.Errorf("%d vendors, want only the first", len(list.Vendors))
	}
}
