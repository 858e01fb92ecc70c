package backend

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"vendorgate/config"

	"github.com/redis/go-redis/v9"

	"vendorgate/backend/store"
	"vendorgate/backend/store/sqlite"

	"vendorgate/shared/apikey"
	"vendorgate/shared/testredis"
	"vendorgate/shared/wire"
)

func TestInternalTokenGuardsVendorAndInternalPaths(t *testing.T) {
	h := start(t)
	v := h.newVendor("sandbox", "mvr")
	for _, path := range []string{"/api/vendor/v1/me", "/api/vendor/v1/orders", "/api/vendor/v1/nope", "/internal/v1/keys/" + strings.Repeat("a", 64)} {
		for _, token := range []string{"", "wrong-token-wrong-token", testInternalToken + "x"} {
			hdr := map[string]string{wire.HeaderVendorID: v}
			if token != "" {
				hdr[wire.HeaderInternalToken] = token
			}
			r := h.do("GET", h.api+path, hdr, "")
			code, _, _ := r.envelope(t)
			if r.status != 401 || code != "invalid_api_key" || !strings.Contains(string(r.body), "internal token required") {
				t.Errorf("%s with token %q: %d %s", path, token, r.status, r.body)
			}
		}
	}
}

func TestMe(t *testing.T) {
	h := start(t)
	v := h.newVendor("live", "psp", "mvr")
	r := h.vendorCall(v, "GET", "/api/vendor/v1/me", nil, "")
	var me map[string]any
	h.decode(r, 200, &me)
	if r.header.Get("Cache-Control") != "no-store" {
		t.Errorf("Cache-Control = %q", r.header.Get("Cache-Control"))
	}
	if me["vendor_id"] != v || me["company_name"] != "Acme live" || me["environment"] != "live" || len(me) != 4 {
		t.Fatalf("me = %v", me)
	}
	if s := me["enabled_services"].([]any); len(s) != 2 || s[0] != "mvr" || s[1] != "psp" {
		t.Fatalf("enabled_services = %v", s)
	}

	// A suspended vendor can still call it.
	h.adminCall("POST", "/admin/v1/vendors/"+v+"/suspend", "")
	if r := h.vendorCall(v, "GET", "/api/vendor/v1/me", nil, ""); r.status != 200 {
		t.Fatalf("suspended me: %d %s", r.status, r.body)
	}

	// Not approved: account_not_approved. Unknown vendor: invalid_api_key.
	var pending struct {
		VendorID string `json:"vendor_id"`
	}
	h.decode(h.adminCall("POST", "/admin/v1/vendors", `{"company_name":"P","environment":"sandbox","enabled_services":[]}`), 201, &pending)
	if r := h.vendorCall(pending.VendorID, "GET", "/api/vendor/v1/me", nil, ""); r.status != 403 || r.code() != "account_not_approved" {
		t.Fatalf("pending me: %d %s", r.status, r.body)
	}
	if r := h.vendorCall("6f1c1c7e-1111-4d2a-9c77-0123456789ab", "GET", "/api/vendor/v1/me", nil, ""); r.status != 401 || r.code() != "invalid_api_key" {
		t.Fatalf("unknown vendor me: %d %s", r.status, r.body)
	}
}

func TestRoutingEnvelopes(t *testing.T) {
	h := start(t)
	v := h.newVendor("sandbox", "mvr")
	r := h.vendorCall(v, "GET", "/api/vendor/v1/unknown", nil, "")
	if r.status != 404 || r.code() != "not_found" || r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("unknown path: %d %s", r.status, r.body)
	}
	r = h.vendorCall(v, "DELETE", "/api/vendor/v1/me", nil, "")
	if r.status != 405 || r.code() != "method_not_allowed" || r.header.Get("Allow") != "GET" {
		t.Fatalf("405: %d %s Allow=%q", r.status, r.body, r.header.Get("Allow"))
	}
	// No redirect for a trailing slash.
	if r := h.vendorCall(v, "GET", "/api/vendor/v1/me/", nil, ""); r.status != 404 {
		t.Fatalf("trailing slash: %d", r.status)
	}
}

func TestKeyIssueLookupRevoke(t *testing.T) {
	h := start(t)
	v := h.newVendor("sandbox", "mvr")
	var issued struct {
		Key, KeyID, VendorID string
		CreatedAt, ExpiresAt time.Time
	}
	r := h.adminCall("POST", "/admin/v1/vendors/"+v+"/keys", `{"lifetime_seconds": 3600}`)
	var raw map[string]any
	h.decode(r, 201, &raw)
	b, _ := json.Marshal(raw)
	_ = json.Unmarshal(b, &struct {
		Key       *string    `json:"key"`
		KeyID     *string    `json:"key_id"`
		VendorID  *string    `json:"vendor_id"`
		CreatedAt *time.Time `json:"created_at"`
		ExpiresAt *time.Time `json:"expires_at"`
	}{&issued.Key, &issued.KeyID, &issued.VendorID, &issued.CreatedAt, &issued.ExpiresAt})
	if len(raw) != 5 || issued.VendorID != v || issued.ExpiresAt.Sub(issued.CreatedAt) != time.Hour {
		t.Fatalf("issued = %s", r.body)
	}
	k, err := apikey.Parse(issued.Key, apikey.DefaultPrefixes())
	if err != nil || k.Environment != "sandbox" {
		t.Fatalf("issued key does not parse as a sandbox key: %v", err)
	}
	// Signed with the first secret: it verifies where that secret is any
	// of the list, and not under another secret.
	rotated, _ := apikey.NewSigner([]string{"another-key-signing-secret-0123456789", testSigning})
	other, _ := apikey.NewSigner([]string{"another-key-signing-secret-0123456789"})
	if !rotated.Verify(k) || other.Verify(k) {
		t.Fatal("the issued key is not signed with the configured key-signing secret")
	}
	// Stored hashed: neither the key nor its secret is in the database
	// files; its hash is.
	var files []byte
	for _, f := range []string{h.o.Config.Database, h.o.Config.Database + "-wal"} {
		b, _ := os.ReadFile(f)
		files = append(files, b...)
	}
	if bytes.Contains(files, []byte(k.Secret)) || !bytes.Contains(files, []byte(apikey.Hash(issued.Key))) {
		t.Fatal("the database holds the key itself, or not its hash")
	}

	lookup := func(hash string) resp {
		return h.do("GET", h.api+wire.KeyLookupPath+hash, map[string]string{wire.HeaderInternalToken: testInternalToken}, "")
	}
	var res wire.KeyResolution
	h.decode(lookup(apikey.Hash(issued.Key)), 200, &res)
	if res.KeyID != issued.KeyID || res.VendorID != v || res.Environment != "sandbox" || res.RevokedAt != nil ||
		res.Vendor.Status != "approved" || res.Vendor.CompanyName != "Acme sandbox" || len(res.Vendor.EnabledServices) != 1 ||
		!res.ExpiresAt.Equal(issued.ExpiresAt) {
		t.Fatalf("resolution = %+v", res)
	}
	for _, hash := range []string{apikey.Hash("vgsandbx_nope"), "zz", strings.Repeat("A", 64)} {
		if r := lookup(hash); r.status != 404 || r.code() != "not_found" {
			t.Fatalf("unknown hash %q: %d %s", hash, r.status, r.body)
		}
	}

	// The key list never shows the key.
	r = h.adminCall("GET", "/admin/v1/vendors/"+v+"/keys", "")
	if r.status != 200 || strings.Contains(string(r.body), issued.Key) || !strings.Contains(string(r.body), `"prefix":"vgsandbx"`) ||
		!strings.Contains(string(r.body), `"revoked_at":null`) {
		t.Fatalf("key list: %d %s", r.status, r.body)
	}

	// Revoked keys still resolve, with revoked_at.
	r = h.adminCall("POST", "/admin/v1/keys/"+issued.KeyID+"/revoke", "")
	if r.status != 200 || strings.Contains(string(r.body), `"revoked_at":null`) {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	h.decode(lookup(apikey.Hash(issued.Key)), 200, &res)
	if res.RevokedAt == nil {
		t.Fatal("revoked key resolves without revoked_at")
	}
	if r := h.adminCall("POST", "/admin/v1/keys/6f1c1c7e-1111-4d2a-9c77-0123456789ab/revoke", ""); r.status != 404 {
		t.Fatalf("revoke unknown key: %d", r.status)
	}

	// Default lifetime is the configured 90 days; a live vendor gets a live key.
	lv := h.newVendor("live", "mvr")
	h.decode(h.adminCall("POST", "/admin/v1/vendors/"+lv+"/keys", ""), 201, &raw)
	created, _ := time.Parse(time.RFC3339, raw["created_at"].(string))
	expires, _ := time.Parse(time.RFC3339, raw["expires_at"].(string))
	if expires.Sub(created) != 90*24*time.Hour || !strings.HasPrefix(raw["key"].(string), "vglive01_") {
		t.Fatalf("default key = %v", raw)
	}
	if r := h.adminCall("POST", "/admin/v1/vendors/"+lv+"/keys", `{"lifetime_seconds": -5}`); r.status != 400 || r.code() != "validation_error" {
		t.Fatalf("negative lifetime: %d %s", r.status, r.body)
	}
}

func TestAdminAuth(t *testing.T) {
	h := start(t)
	for _, auth := range []string{"", "Bearer wrong", "Bearer " + testAdminToken + "x", testAdminToken} {
		r := h.do("GET", h.admin+"/admin/v1/vendors", map[string]string{"Authorization": auth}, "")
		if r.status != 401 || r.code() != "invalid_api_key" {
			t.Errorf("auth %q: %d %s", auth, r.status, r.body)
		}
	}
	// The internal token is not the admin token.
	r := h.do("GET", h.admin+"/admin/v1/vendors", map[string]string{"Authorization": "Bearer " + testInternalToken}, "")
	if r.status != 401 {
		t.Fatalf("internal token on admin: %d", r.status)
	}
}

func TestAdminVendorLifecycle(t *testing.T) {
	h := start(t)
	r := h.adminCall("POST", "/admin/v1/vendors", `{"company_name":"Beta","environment":"moon","enabled_services":["mvr","xray"]}`)
	code, fields, _ := r.envelope(t)
	if r.status != 400 || code != "validation_error" || fields["environment"] == "" || fields["enabled_services"] == "" {
		t.Fatalf("invalid create: %d %s", r.status, r.body)
	}
	if r := h.adminCall("POST", "/admin/v1/vendors", `{"company_name":"Beta","environment":"live","enabled_services":[],"extra":1}`); r.status != 400 {
		t.Fatalf("unknown field: %d %s", r.status, r.body)
	}
	var a, b map[string]any
	if r := h.adminCall("POST", "/admin/v1/vendors", `{"company_name":"Alpha","environment":"sandbox","enabled_services":["psp","mvr","psp"]}`); r.status != 400 {
		t.Fatalf("duplicate service: %d", r.status)
	}
	h.decode(h.adminCall("POST", "/admin/v1/vendors", `{"company_name":"Alpha","environment":"sandbox","enabled_services":["psp","mvr"]}`), 201, &a)
	if a["status"] != "pending" || len(a) != 6 || a["enabled_services"].([]any)[0] != "mvr" {
		t.Fatalf("created = %v", a)
	}
	id := a["vendor_id"].(string)
	h.clock.Advance(time.Second)
	h.decode(h.adminCall("POST", "/admin/v1/vendors", `{"company_name":"Bravo","environment":"live","enabled_services":[]}`), 201, &b)

	var list struct {
		Vendors []map[string]any `json:"vendors"`
	}
	h.decode(h.adminCall("GET", "/admin/v1/vendors", ""), 200, &list)
	if len(list.Vendors) != 2 || list.Vendors[0]["vendor_id"] != id || list.Vendors[1]["vendor_id"] != b["vendor_id"] {
		t.Fatalf("list (oldest first) = %v", list.Vendors)
	}
	h.decode(h.adminCall("GET", "/admin/v1/vendors/"+id, ""), 200, &a)
	if a["company_name"] != "Alpha" {
		t.Fatalf("get = %v", a)
	}

	a = nil
	steps := []struct {
		action, want string
		status       int
	}{
		{"reinstate", "", 409}, // pending cannot be reinstated
		{"approve", "approved", 200},
		{"approve", "approved", 200}, // idempotent
		{"suspend", "suspended", 200},
		{"approve", "", 409}, // suspended comes back with reinstate
		{"reinstate", "approved", 200},
	}
	for _, s := range steps {
		r := h.adminCall("POST", "/admin/v1/vendors/"+id+"/"+s.action, "")
		if r.status != s.status {
			t.Fatalf("%s: %d %s", s.action, r.status, r.body)
		}
		if s.status == 409 {
			if r.code() != "request_failed" {
				t.Fatalf("%s conflict code %q", s.action, r.code())
			}
			continue
		}
		h.decode(r, 200, &a)
		if a["status"] != s.want {
			t.Fatalf("%s: status %v", s.action, a["status"])
		}
	}
	h.decode(h.adminCall("PUT", "/admin/v1/vendors/"+id+"/services", `{"enabled_services":["driver_reviews","cdlis"]}`), 200, &a)
	if s := a["enabled_services"].([]any); len(s) != 2 || s[0] != "cdlis" || s[1] != "driver_reviews" {
		t.Fatalf("services = %v", s)
	}
	if r := h.adminCall("PUT", "/admin/v1/vendors/"+id+"/services", `{"enabled_services":["nope"]}`); r.status != 400 {
		t.Fatalf("bad services: %d", r.status)
	}
	h.decode(h.adminCall("PUT", "/admin/v1/vendors/"+id+"/services", `{"enabled_services":[]}`), 200, &a)
	if len(a["enabled_services"].([]any)) != 0 {
		t.Fatalf("emptied services = %v", a)
	}
	for _, path := range []string{"/admin/v1/vendors/6f1c1c7e-1111-4d2a-9c77-0123456789ab", "/admin/v1/vendors/not-a-uuid"} {
		if r := h.adminCall("GET", path, ""); r.status != 404 || r.code() != "not_found" {
			t.Fatalf("%s: %d %s", path, r.status, r.body)
		}
		if r := h.adminCall("POST", path+"/approve", ""); r.status != 404 {
			t.Fatalf("%s approve: %d", path, r.status)
		}
	}
}

func TestInvalidationsPublishedOnRedis(t *testing.T) {
	rs := testredis.Start(t)
	h := start(t, func(o *Options) { o.Config.RedisURL = config.List{rs.URL()} })
	v := h.newVendor("sandbox", "mvr")
	var issued map[string]any
	h.decode(h.adminCall("POST", "/admin/v1/vendors/"+v+"/keys", ""), 201, &issued)

	rc := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sub := rc.Subscribe(ctx, wire.InvalidationChannel)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil { // the subscription confirmation
		t.Fatal(err)
	}
	next := func() wire.Invalidation {
		t.Helper()
		m, err := sub.ReceiveMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var inv wire.Invalidation
		if err := json.Unmarshal([]byte(m.Payload), &inv); err != nil {
			t.Fatalf("payload %q: %v", m.Payload, err)
		}
		return inv
	}

	h.adminCall("POST", "/admin/v1/keys/"+issued["key_id"].(string)+"/revoke", "")
	if inv := next(); inv.KeyHash != apikey.Hash(issued["key"].(string)) || inv.VendorID != "" {
		t.Fatalf("revoke published %+v", inv)
	}
	h.adminCall("POST", "/admin/v1/vendors/"+v+"/suspend", "")
	if inv := next(); inv.VendorID != v || inv.KeyHash != "" {
		t.Fatalf("suspend published %+v", inv)
	}
	h.adminCall("POST", "/admin/v1/vendors/"+v+"/reinstate", "")
	if inv := next(); inv.VendorID != v {
		t.Fatalf("reinstate published %+v", inv)
	}
	h.adminCall("PUT", "/admin/v1/vendors/"+v+"/services", `{"enabled_services":["psp"]}`)
	if inv := next(); inv.VendorID != v {
		t.Fatalf("services published %+v", inv)
	}
}

// TestAnnouncementSaysWhetherPublished: the answer of every admin action
// that announces a change says whether the backend published it: with its
// Redis stopped, "published": false and "publish_failed" (and repeating
// the action once Redis is back publishes it); with no Redis configured,
// false and "cache_ttl".
func TestAnnouncementSaysWhetherPublished(t *testing.T) {
	type announcement struct {
		Published    *bool  `json:"published"`
		Invalidation string `json:"invalidation"`
	}
	check := func(t *testing.T, h *harness, method, path, body string, published bool, invalidation string) {
		t.Helper()
		var a announcement
		h.decode(h.adminCall(method, path, body), 200, &a)
		if a.Published == nil || *a.Published != published || a.Invalidation != invalidation {
			t.Errorf("%s %s: published %v, invalidation %q; want %v, %q", method, path, a.Published, a.Invalidation, published, invalidation)
		}
	}
	actions := func(t *testing.T, h *harness, published bool, invalidation string) {
		t.Helper()
		v := h.newVendor("sandbox", "mvr")
		var issued map[string]any
		h.decode(h.adminCall("POST", "/admin/v1/vendors/"+v+"/keys", ""), 201, &issued)
		check(t, h, "POST", "/admin/v1/keys/"+issued["key_id"].(string)+"/revoke", "", published, invalidation)
		check(t, h, "POST", "/admin/v1/vendors/"+v+"/suspend", "", published, invalidation)
		check(t, h, "POST", "/admin/v1/vendors/"+v+"/reinstate", "", published, invalidation)
		check(t, h, "POST", "/admin/v1/vendors/"+v+"/approve", "", published, invalidation) // unchanged: announced again
		check(t, h, "PUT", "/admin/v1/vendors/"+v+"/services", `{"enabled_services":["psp"]}`, published, invalidation)
	}
	t.Run("redis", func(t *testing.T) {
		rs := testredis.Start(t)
		h := start(t, func(o *Options) { o.Config.RedisURL = config.List{rs.URL()} })
		actions(t, h, true, "redis")
		rs.Stop()
		actions(t, h, false, "publish_failed")
		rs.Restart(t)
		actions(t, h, true, "redis")
	})
	t.Run("no redis", func(t *testing.T) {
		actions(t, start(t), false, "cache_ttl")
	})
}

func TestSeedSandboxVendorOnFirstStartOnly(t *testing.T) {
	h := start(t, func(o *Options) { o.Config.SeedSandboxVendor = true })
	var list struct {
		Vendors []map[string]any `json:"vendors"`
	}
	h.decode(h.adminCall("GET", "/admin/v1/vendors", ""), 200, &list)
	if len(list.Vendors) != 1 {
		t.Fatalf("vendors = %v", list.Vendors)
	}
	v := list.Vendors[0]
	if v["company_name"] != "Sandbox Demo Vendor" || v["status"] != "approved" || v["environment"] != "sandbox" || len(v["enabled_services"].([]any)) != 4 {
		t.Fatalf("seeded = %v", v)
	}
	h.restart()
	h.decode(h.adminCall("GET", "/admin/v1/vendors", ""), 200, &list)
	if len(list.Vendors) != 1 {
		t.Fatalf("seeded again: %d vendors", len(list.Vendors))
	}
}

func TestHealthReadyMetrics(t *testing.T) {
	h := start(t)
	for _, p := range []string{"/healthz", "/readyz"} {
		if r := h.do("GET", h.admin+p, nil, ""); r.status != 200 {
			t.Fatalf("%s: %d %s", p, r.status, r.body)
		}
	}
	v := h.newVendor("sandbox", allServices...)
	h.vendorCall(v, "GET", "/api/vendor/v1/me", nil, "")
	o := h.mustPlace(v, "D1234567")
	h.step(v, o.OrderID)
	h.eventually(v, o.OrderID, func(o wire.Order) bool { return o.Final })
	r := h.do("GET", h.admin+"/metrics", nil, "")
	text := string(r.body)
	for _, want := range []string{
		`vendorgate_backend_requests_total{method="GET",route="/api/vendor/v1/me",status="200"} 1`,
		`vendorgate_backend_request_duration_seconds_count{route="/api/vendor/v1/orders/{order_id}"}`,
		`vendorgate_backend_orders_created_total{environment="sandbox"} 1`,
		`vendorgate_backend_orders{status="completed"} 1`,
		`vendorgate_backend_orders{status="processing"} 0`,
		`vendorgate_backend_simulator_steps_total{outcome="completed",service="mvr"} 1`,
		`vendorgate_backend_sweeper_runs_total`,
		`vendorgate_backend_sweeper_orders_closed_total 0`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// readyz fails once the database is closed.
	h.b.store.Close()
	if r := h.do("GET", h.admin+"/readyz", nil, ""); r.status != 503 {
		t.Fatalf("readyz with the database closed: %d", r.status)
	}
}

func TestInjectedStoreIsUsed(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "injected.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateVendor(ctx, &store.Vendor{ID: "6f1c1c7e-1111-4d2a-9c77-0123456789ab", CompanyName: "Injected",
		Environment: "live", Status: "approved", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	h := start(t, func(o *Options) { o.Store = st; o.Config.Database = "/nonexistent/never/opened.db" })
	r := h.adminCall("GET", "/admin/v1/vendors", "")
	if r.status != 200 || !strings.Contains(string(r.body), "Injected") {
		t.Fatalf("vendors: %d %s", r.status, r.body)
	}
}
