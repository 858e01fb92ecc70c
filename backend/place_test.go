package backend

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"vendorgate/config"

	"vendorgate/backend/store"
	"vendorgate/shared/wire"
)

func TestPlaceOrderAnswersTheOrder(t *testing.T) {
	h := start(t)
	v := h.newVendor("sandbox", allServices...)
	r := h.place(v, "k1", strings.Replace(orderBody("d1234567"), "MC-123456", "mc-0012345", 1))
	if r.status != 202 {
		t.Fatalf("place: %d %s", r.status, r.body)
	}
	o := r.order(t)
	if r.header.Get("Location") != testPublicURL+"/api/vendor/v1/orders/"+o.OrderID || r.header.Get("Retry-After") != "1" ||
		r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("headers = %v", r.header)
	}
	if o.MCNumber != "MC12345" || o.Status != "processing" || o.Final || o.SafetyScore != nil || o.Environment != "sandbox" ||
		deref(o.ExternalReference) != "po-77" || o.Poll.URL != testPublicURL+"/api/vendor/v1/orders/"+o.OrderID || o.Poll.AfterSeconds != 1 {
		t.Fatalf("order = %+v", o)
	}
	if len(o.Services) != 4 || service(o, "mvr").State == nil || *service(o, "mvr").State != "TX" || service(o, "psp").State != nil {
		t.Fatalf("services = %+v", o.Services)
	}
	// Every field present, nulls included.
	var raw map[string]json.RawMessage
	_ = json.Unmarshal(r.body, &raw)
	for _, f := range []string{"order_id", "status", "final", "safety_score", "environment", "mc_number", "external_reference", "services", "created_at", "poll"} {
		if _, ok := raw[f]; !ok {
			t.Errorf("order lacks %s", f)
		}
	}
	var entries []map[string]json.RawMessage
	_ = json.Unmarshal(raw["services"], &entries)
	for _, e := range entries {
		if len(e) != 7 || string(e["file_url"]) != "null" || string(e["result"]) != "null" || string(e["completed_at"]) != "null" {
			t.Errorf("service entry = %v", e)
		}
	}
	if ts := strings.Trim(string(raw["created_at"]), `"`); !strings.HasSuffix(ts, "Z") || strings.Contains(ts, ".") {
		t.Errorf("created_at %s is not RFC 3339 UTC with seconds", ts)
	}
	// No external_reference: null.
	r = h.place(v, "k2", strings.Replace(orderBody("D1"), `"external_reference":"po-77",`, "", 1))
	if o := r.order(t); o.ExternalReference != nil {
		t.Fatalf("external_reference = %q", *o.ExternalReference)
	}
	// Live vendors place live orders.
	lv := h.newVendor("live", "mvr")
	if o := h.mustPlace(lv, "D1", "mvr"); o.Environment != "live" || o.Poll.AfterSeconds != 60 {
		t.Fatalf("live order = %+v", o)
	}
}

func TestPlaceOrderValidation(t *testing.T) {
	h := start(t)
	v := h.newVendor("sandbox", allServices...)
	good := orderBody("D1234567")
	long := strings.Repeat("x", 101)
	today := h.clock.Now().Format("2006-01-02")
	young := h.clock.Now().AddDate(-15, 0, 0).Format("2006-01-02")
	cases := []struct {
		name, body, key string
		field           string
	}{
		{"missing key", good, "", "Idempotency-Key"},
		{"long key", good, strings.Repeat("k", 256), "Idempotency-Key"},
		{"invalid JSON", `{"mc_number":`, "k", "body"},
		{"not an object", `[1,2]`, "k", "body"},
		{"unknown field", strings.Replace(good, `"services"`, `"color":"red","services"`, 1), "k", "color"},
		{"unknown driver field", strings.Replace(good, `"first_name"`, `"middle_name":"Q","first_name"`, 1), "k", "driver.middle_name"},
		{"mc missing", strings.Replace(good, `"mc_number":"MC-123456",`, "", 1), "k", "mc_number"},
		{"mc too long", strings.Replace(good, "MC-123456", "MC-123456789", 1), "k", "mc_number"},
		{"mc zero", strings.Replace(good, "MC-123456", "MC-000", 1), "k", "mc_number"},
		{"mc letters", strings.Replace(good, "MC-123456", "MX-12", 1), "k", "mc_number"},
		{"mc wrong type", strings.Replace(good, `"MC-123456"`, `123456`, 1), "k", "mc_number"},
		{"external_reference too long", strings.Replace(good, "po-77", strings.Repeat("r", 129), 1), "k", "external_reference"},
		{"driver missing", `{"mc_number":"MC1","services":["mvr"]}`, "k", "driver"},
		{"first_name empty", strings.Replace(good, `"Ann"`, `"  "`, 1), "k", "driver.first_name"},
		{"last_name long", strings.Replace(good, `"Lee"`, `"`+long+`"`, 1), "k", "driver.last_name"},
		{"dob format", strings.Replace(good, "1980-02-03", "03/02/1980", 1), "k", "driver.date_of_birth"},
		{"dob today", strings.Replace(good, "1980-02-03", today, 1), "k", "driver.date_of_birth"},
		{"dob too young", strings.Replace(good, "1980-02-03", young, 1), "k", "driver.date_of_birth"},
		{"dob too old", strings.Replace(good, "1980-02-03", "1890-01-01", 1), "k", "driver.date_of_birth"},
		{"license chars", strings.Replace(good, "D1234567", "D-123", 1), "k", "driver.license_number"},
		{"license long", strings.Replace(good, "D1234567", strings.Repeat("A", 33), 1), "k", "driver.license_number"},
		{"license empty", strings.Replace(good, "D1234567", "", 1), "k", "driver.license_number"},
		{"state", strings.Replace(good, `"TX"`, `"XX"`, 1), "k", "driver.license_state"},
		{"services empty", strings.Replace(good, `["mvr","psp","cdlis","driver_reviews"]`, `[]`, 1), "k", "services"},
		{"services missing", strings.Replace(good, `,"services":["mvr","psp","cdlis","driver_reviews"]`, ``, 1), "k", "services"},
		{"services unknown", strings.Replace(good, `"cdlis"`, `"xray"`, 1), "k", "services"},
		{"services duplicate", strings.Replace(good, `"cdlis"`, `"mvr"`, 1), "k", "services"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := h.place(v, c.key, c.body)
			code, fields, _ := r.envelope(t)
			if r.status != 400 || code != "validation_error" || fields[c.field] == "" {
				t.Fatalf("%d %s; want 400 validation_error naming %s", r.status, r.body, c.field)
			}
		})
	}
	// Several problems at once: every field is named.
	r := h.place(v, "", strings.Replace(strings.Replace(good, "MC-123456", "x", 1), `"TX"`, `"ZZ"`, 1))
	if _, fields, _ := r.envelope(t); len(fields) != 3 {
		t.Fatalf("fields = %v; want Idempotency-Key, mc_number and driver.license_state", fields)
	}
	// Nothing was placed.
	var list wire.OrderList
	h.decode(h.vendorCall(v, "GET", "/api/vendor/v1/orders", nil, ""), 200, &list)
	if len(list.Orders) != 0 {
		t.Fatalf("%d orders placed by invalid requests", len(list.Orders))
	}
}

func TestPlaceOrderRefusals(t *testing.T) {
	h := start(t, func(o *Options) { o.Config.MVRUnavailableStates = config.List{"NY"} })
	v := h.newVendor("sandbox", allServices...)
	good := orderBody("D1234567")

	t.Run("payload too large", func(t *testing.T) {
		big := strings.Replace(good, "po-77", strings.Repeat("p", 5000), 1)
		r := h.place(v, "big", big)
		if code, _, _ := r.envelope(t); r.status != 413 || code != "payload_too_large" {
			t.Fatalf("%d %s", r.status, r.body)
		}
	})
	t.Run("media type", func(t *testing.T) {
		for _, ct := range []string{"text/plain", "", "application/xml", "application/jsonx"} {
			r := h.vendorCall(v, "POST", "/api/vendor/v1/orders", map[string]string{"Content-Type": ct, wire.HeaderIdempotency: "ct"}, good)
			if code, _, _ := r.envelope(t); r.status != 415 || code != "unsupported_media_type" {
				t.Fatalf("Content-Type %q: %d %s", ct, r.status, r.body)
			}
		}
		r := h.vendorCall(v, "POST", "/api/vendor/v1/orders", map[string]string{"Content-Type": "Application/JSON; charset=utf-8", wire.HeaderIdempotency: "ct"}, good)
		if r.status != 202 {
			t.Fatalf("json with charset: %d %s", r.status, r.body)
		}
	})
	t.Run("state unavailable", func(t *testing.T) {
		ny := strings.Replace(good, `"TX"`, `"ny"`, 1)
		r := h.place(v, "ny", ny)
		if code, _, _ := r.envelope(t); r.status != 422 || code != "mvr_state_unavailable" {
			t.Fatalf("%d %s", r.status, r.body)
		}
		// Without an MVR the state does not matter.
		if r := h.place(v, "ny-psp", strings.Replace(orderBody("D1", "psp"), `"TX"`, `"NY"`, 1)); r.status != 202 {
			t.Fatalf("psp in NY: %d %s", r.status, r.body)
		}
	})
	t.Run("service not enabled", func(t *testing.T) {
		only := h.newVendor("sandbox", "mvr")
		r := h.place(only, "sne", orderBody("D1", "mvr", "psp"))
		if code, _, _ := r.envelope(t); r.status != 403 || code != "service_not_enabled" {
			t.Fatalf("%d %s", r.status, r.body)
		}
		none := h.newVendor("sandbox")
		r = h.place(none, "sne", orderBody("D1", "mvr"))
		if code, _, _ := r.envelope(t); r.status != 403 || code != "service_not_enabled" {
			t.Fatalf("no services: %d %s", r.status, r.body)
		}
	})
	t.Run("price unavailable", func(t *testing.T) {
		r := h.place(v, "price", strings.Replace(good, "MC-123456", "MC-099999999", 1))
		if code, _, _ := r.envelope(t); r.status != 503 || code != "price_unavailable" {
			t.Fatalf("%d %s", r.status, r.body)
		}
		// Refused placements leave the key free.
		if r := h.place(v, "price", good); r.status != 202 {
			t.Fatalf("key after a refusal: %d %s", r.status, r.body)
		}
	})
	t.Run("suspended", func(t *testing.T) {
		s := h.newVendor("sandbox", allServices...)
		h.adminCall("POST", "/admin/v1/vendors/"+s+"/suspend", "")
		r := h.place(s, "susp", good)
		if code, _, _ := r.envelope(t); r.status != 403 || code != "account_suspended" {
			t.Fatalf("%d %s", r.status, r.body)
		}
	})
	t.Run("not approved", func(t *testing.T) {
		var p map[string]any
		h.decode(h.adminCall("POST", "/admin/v1/vendors", `{"company_name":"P","environment":"sandbox","enabled_services":["mvr"]}`), 201, &p)
		r := h.place(p["vendor_id"].(string), "pend", orderBody("D1", "mvr"))
		if code, _, _ := r.envelope(t); r.status != 403 || code != "account_not_approved" {
			t.Fatalf("%d %s", r.status, r.body)
		}
	})
}

func TestIdempotency(t *testing.T) {
	h := start(t)
	v := h.newVendor("sandbox", allServices...)
	first := h.place(v, "idem-1", orderBody("D1234567"))
	o := first.order(t)

	// Same key, same request (whitespace, field order and mc_number
	// spelling aside): the same order, 202.
	same := strings.Replace(orderBody("D1234567"), "MC-123456", "mc 123456", 1)
	same = strings.Replace(same, `{"mc_number"`, `{ "services":["driver_reviews","cdlis","psp","mvr"], "mc_number"`, 1)
	same = strings.Replace(same, `,"services":["mvr","psp","cdlis","driver_reviews"]`, "", 1)
	r := h.place(v, "idem-1", same)
	if r.status != 202 || r.order(t).OrderID != o.OrderID {
		t.Fatalf("replay: %d %s", r.status, r.body)
	}
	// Same key, another request: 409 idempotency_conflict naming the order.
	r = h.place(v, "idem-1", orderBody("D7654321"))
	code, _, orderID := r.envelope(t)
	if r.status != 409 || code != "idempotency_conflict" || orderID != o.OrderID {
		t.Fatalf("conflict: %d %s", r.status, r.body)
	}
	// order_id appears only with idempotency_conflict.
	if r := h.place(v, "", orderBody("D1")); strings.Contains(string(r.body), "order_id") {
		t.Fatalf("order_id in another error: %s", r.body)
	}
	// Scoped per vendor.
	w := h.newVendor("sandbox", allServices...)
	if r := h.place(w, "idem-1", orderBody("D1234567")); r.status != 202 || r.order(t).OrderID == o.OrderID {
		t.Fatalf("other vendor, same key: %d %s", r.status, r.body)
	}

	// A placement still in progress (its record reserved, no order yet).
	ctx := context.Background()
	if rec, err := h.b.store.ReserveIdempotency(ctx, store.Idempotency{VendorID: v, Key: "busy", RequestHash: "x", CreatedAt: h.clock.Now()}); err != nil || rec != nil {
		t.Fatal(rec, err)
	}
	r = h.place(v, "busy", orderBody("D1"))
	if code, _, _ := r.envelope(t); r.status != 409 || code != "in_progress" || r.header.Get("Retry-After") != "1" {
		t.Fatalf("in progress: %d %s Retry-After=%q", r.status, r.body, r.header.Get("Retry-After"))
	}
	// One abandoned by a crash long ago is taken over.
	h.clock.Advance(time.Minute)
	if r := h.place(v, "busy", orderBody("D1")); r.status != 202 {
		t.Fatalf("abandoned record: %d %s", r.status, r.body)
	}
}

func TestConcurrentPlacementsWithOneKeyPlaceOneOrder(t *testing.T) {
	h := start(t)
	v := h.newVendor("sandbox", allServices...)
	type result struct {
		status int
		id     string
		code   string
	}
	results := make(chan result, 8)
	for i := 0; i < 8; i++ {
		go func() {
			r := h.place(v, "race", orderBody("D1234567"))
			var o wire.Order
			_ = json.Unmarshal(r.body, &o)
			results <- result{r.status, o.OrderID, r.code()}
		}()
	}
	ids := map[string]bool{}
	for i := 0; i < 8; i++ {
		r := <-results
		switch {
		case r.status == 202:
			ids[r.id] = true
		case r.status == 409 && r.code == "in_progress":
		default:
			t.Fatalf("unexpected answer %+v", r)
		}
	}
	if len(ids) != 1 {
		t.Fatalf("%d different orders for one key", len(ids))
	}
	var list wire.OrderList
	h.decode(h.vendorCall(v, "GET", "/api/vendor/v1/orders", nil, ""), 200, &list)
	if len(list.Orders) != 1 {
		t.Fatalf("%d orders stored", len(list.Orders))
	}
}

func TestGetOrderNotFoundIsTheSameForEveryReason(t *testing.T) {
	h := start(t)
	v, w := h.newVendor("sandbox", allServices...), h.newVendor("sandbox", allServices...)
	o := h.mustPlace(v, "D1234567")
	var bodies []string
	for _, id := range []string{o.OrderID, "not-a-uuid", "6f1c1c7e-1111-4d2a-9c77-0123456789ab"} {
		r := h.vendorCall(w, "GET", "/api/vendor/v1/orders/"+id, nil, "")
		if r.status != 404 || r.code() != "not_found" {
			t.Fatalf("%s: %d %s", id, r.status, r.body)
		}
		bodies = append(bodies, string(r.body))
	}
	if bodies[0] != bodies[1] || bodies[1] != bodies[2] {
		t.Fatalf("404 bodies differ:\n%s", strings.Join(bodies, "\n"))
	}
	// Reports of another vendor's order: the same 404.
	h.step(v, o.OrderID)
	h.eventually(v, o.OrderID, func(o wire.Order) bool { return o.Final })
	if r := h.vendorCall(w, "GET", "/api/vendor/v1/orders/"+o.OrderID+"/reports/mvr", nil, ""); r.status != 404 || r.code() != "not_found" {
		t.Fatalf("other vendor's report: %d %s", r.status, r.body)
	}
}

func TestGetOrder202WhileRunning200OnceFinal(t *testing.T) {
	h := start(t)
	v := h.newVendor("sandbox", allServices...)
	o := h.mustPlace(v, "D1234567")
	r := h.vendorCall(v, "GET", "/api/vendor/v1/orders/"+o.OrderID, nil, "")
	loc := testPublicURL + "/api/vendor/v1/orders/" + o.OrderID
	if r.status != 202 || r.header.Get("Retry-After") != "1" || r.header.Get("Location") != loc || r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("running: %d %v", r.status, r.header)
	}
	// Nothing happens before one sandbox step has passed.
	h.clock.Advance(testDelay - time.Millisecond)
	h.runSandbox()
	if got := h.get(v, o.OrderID); got.Status != "processing" || service(got, "mvr").Status != "processing" {
		t.Fatalf("worked before its delay: %+v", got)
	}
	h.clock.Advance(time.Millisecond)
	h.eventually(v, o.OrderID, func(o wire.Order) bool { return o.Final })
	r = h.vendorCall(v, "GET", "/api/vendor/v1/orders/"+o.OrderID, nil, "")
	if r.status != 200 || r.header.Get("Location") != loc || r.header.Get("Retry-After") != "" || r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("final: %d %v", r.status, r.header)
	}
	if got := r.order(t); got.Poll.AfterSeconds != 0 || got.Status != "completed" {
		t.Fatalf("final order = %+v", got)
	}
}

func TestListOrders(t *testing.T) {
	h := start(t)
	v, w := h.newVendor("sandbox", allServices...), h.newVendor("sandbox", allServices...)
	var ids []string
	for i := 0; i < 5; i++ {
		ids = append(ids, h.mustPlace(v, fmt.Sprintf("D%d", i), "mvr").OrderID)
		h.clock.Advance(time.Millisecond)
	}
	h.mustPlace(w, "D9", "mvr")
	var seen []string
	cursor := ""
	for page := 0; ; page++ {
		path := "/api/vendor/v1/orders?limit=2"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		if page == 1 { // an order placed between pages does not move the boundary
			h.mustPlace(v, "DNEW", "mvr")
		}
		var list wire.OrderList
		r := h.vendorCall(v, "GET", path, nil, "")
		h.decode(r, 200, &list)
		if !strings.Contains(string(r.body), `"next_cursor":`) {
			t.Fatal("next_cursor missing")
		}
		for _, o := range list.Orders {
			seen = append(seen, o.OrderID)
		}
		if list.NextCursor == nil {
			break
		}
		cursor = *list.NextCursor
	}
	want := []string{ids[4], ids[3], ids[2], ids[1], ids[0]}
	if strings.Join(seen, ",") != strings.Join(want, ",") {
		t.Fatalf("pages = %v\nwant    %v", seen, want)
	}
	var list wire.OrderList
	h.decode(h.vendorCall(v, "GET", "/api/vendor/v1/orders", nil, ""), 200, &list)
	if len(list.Orders) != 6 || list.NextCursor != nil || list.Orders[0].Services == nil {
		t.Fatalf("default page: %d orders", len(list.Orders))
	}
	for _, q := range []string{"limit=0", "limit=201", "limit=abc", "limit=%2B5", "limit=-0", "cursor=!!!", "cursor=" + "bm9wZQ"} {
		r := h.vendorCall(v, "GET", "/api/vendor/v1/orders?"+q, nil, "")
		if code, fields, _ := r.envelope(t); r.status != 400 || code != "validation_error" || len(fields) != 1 {
			t.Fatalf("%s: %d %s", q, r.status, r.body)
		}
	}
	h.decode(h.vendorCall(v, "GET", "/api/vendor/v1/orders?limit=200", nil, ""), 200, &list)
	if len(list.Orders) != 6 {
		t.Fatalf("limit=200: %d", len(list.Orders))
	}
}

func TestListDefaultLimitIs50(t *testing.T) {
	h := start(t)
	v := h.newVendor("live", "mvr")
	for i := 0; i < 51; i++ {
		h.mustPlace(v, "D1", "mvr")
	}
	var list wire.OrderList
	h.decode(h.vendorCall(v, "GET", "/api/vendor/v1/orders", nil, ""), 200, &list)
	if len(list.Orders) != 50 || list.NextCursor == nil {
		t.Fatalf("default page: %d orders, next %v", len(list.Orders), list.NextCursor)
	}
}

func TestOrdersSurviveRestart(t *testing.T) {
	h := start(t)
	v := h.newVendor("sandbox", allServices...)
	r := h.place(v, "persist", orderBody("D0003"))
	o := r.order(t)
	h.step(v, o.OrderID)
	h.restart()
	got := h.get(v, o.OrderID)
	if got.Status != "under_review" || deref(service(got, "mvr").Reason) != "manual_review" || service(got, "psp").FileURL == nil {
		t.Fatalf("after restart = %+v", got)
	}
	if r := h.place(v, "persist", orderBody("D0003")); r.status != 202 || r.order(t).OrderID != o.OrderID {
		t.Fatalf("idempotent replay after restart: %d %s", r.status, r.body)
	}
	if r := h.vendorCall(v, "GET", "/api/vendor/v1/orders/"+o.OrderID+"/reports/psp", nil, ""); r.status != 200 {
		t.Fatalf("report after restart: %d", r.status)
	}
}
