package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"vendorgate/config"
	"vendorgate/shared/apierr"
	"vendorgate/shared/sandboxvalues"
	"vendorgate/shared/wire"
)

// TestDocsRoutes: a vendor with no key reads the page and the document on
// the public listener, cacheable and revalidated by ETag, with the
// configured public address (never the request's Host) in the curl lines
// and the servers entry.
func TestDocsRoutes(t *testing.T) {
	b := newTestBackend(t)
	gw := startGateway(t, b, nil)

	// A Host of the client's choosing never reaches the page.
	req, _ := http.NewRequest("GET", gw.url+"/docs", nil)
	req.Host = "evil.example"
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	a := answer{status: resp.StatusCode, header: resp.Header, body: body}
	if a.status != 200 || !strings.HasPrefix(a.header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /docs = %d %s", a.status, a.header.Get("Content-Type"))
	}
	if a.header.Get("Cache-Control") != "public, max-age=300" || a.header.Get("ETag") == "" || a.header.Get("X-Request-Id") == "" {
		t.Fatalf("/docs headers: %v", a.header)
	}
	page := string(a.body)
	for _, rt := range routes {
		if !strings.Contains(page, rt.pattern) {
			t.Errorf("page lacks route %s %s", rt.method, rt.pattern)
		}
	}
	for _, c := range apierr.Codes() {
		if !strings.Contains(page, `id="code-`+string(c)+`"`) {
			t.Errorf("page lacks error code %s", c)
		}
	}
	for _, v := range sandboxvalues.Table() {
		if v.Value != "" && !strings.Contains(page, "<code>"+v.Value+"</code>") {
			t.Errorf("page lacks sandbox value %s", v.Value)
		}
	}
	for _, want := range []string{
		"curl -s \\\n  -H &#39;X-API-Key: YOUR_API_KEY&#39; \\\n  &#39;" + testPublicBaseURL + "/api/vendor/v1/me&#39;",
		// the configured read limit, and the text that follows it
		`&#34;reads&#34;;q=5;w=60`, "<code>reads</code> 5 a minute", `RateLimit: &#34;reads&#34;;r=4;t=12`,
		`<code>vgsandbx_</code>`, `<code>vglive01_</code>`,
		"RateLimit-Policy", "Retry-After",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	if strings.Contains(page, "evil.example") || strings.Contains(page, "<script") || strings.Contains(page, "http://fonts") {
		t.Error("page took the Host header or loads something from elsewhere")
	}

	// Revalidation.
	etag := a.header.Get("ETag")
	for _, inm := range []string{etag, "W/" + etag, `"other", ` + etag, "*"} {
		nm := do(t, "GET", gw.url+"/docs", "", "If-None-Match", inm)
		if nm.status != 304 || len(nm.body) != 0 || nm.header.Get("ETag") != etag || nm.header.Get("Cache-Control") != "public, max-age=300" {
			t.Fatalf("If-None-Match %s = %d (%d bytes) %v", inm, nm.status, len(nm.body), nm.header)
		}
	}
	if nm := do(t, "GET", gw.url+"/docs", "", "If-None-Match", `"stale"`); nm.status != 200 || len(nm.body) == 0 {
		t.Fatalf("a stale ETag = %d", nm.status)
	}

	y := do(t, "GET", gw.url+"/openapi.yaml", "")
	var yd struct {
		Servers []struct{ URL string } `yaml:"servers"`
		Paths   map[string]any         `yaml:"paths"`
	}
	if err := yaml.Unmarshal(y.body, &yd); err != nil || y.status != 200 {
		t.Fatalf("/openapi.yaml = %d: %v", y.status, err)
	}
	j := do(t, "GET", gw.url+"/openapi.json", "")
	var jd struct {
		Servers []struct{ URL string } `json:"servers"`
		Paths   map[string]any         `json:"paths"`
	}
	if err := json.Unmarshal(j.body, &jd); err != nil || j.status != 200 || j.header.Get("Content-Type") != "application/json" {
		t.Fatalf("/openapi.json = %d %s: %v", j.status, j.header.Get("Content-Type"), err)
	}
	for name, s := range map[string][]struct{ URL string }{"yaml": yd.Servers, "json": jd.Servers} {
		if len(s) != 1 || s[0].URL != testPublicBaseURL {
			t.Errorf("%s servers = %+v, want %s", name, s, testPublicBaseURL)
		}
	}
	if len(yd.Paths) != len(jd.Paths) || len(yd.Paths) < len(routes) {
		t.Errorf("paths: yaml %d, json %d", len(yd.Paths), len(jd.Paths))
	}
	for _, ans := range []answer{y, j} {
		if ans.header.Get("Cache-Control") != "public, max-age=300" || ans.header.Get("ETag") == "" || ans.header.Get("ETag") == etag {
			t.Errorf("document headers: %v", ans.header)
		}
	}

	// Everything else stays the vendor API's: envelopes, no-store.
	do(t, "GET", gw.url+"/docs/", "").wantError(t, 404, apierr.NotFound)
	do(t, "GET", gw.url+"/openapi.yml", "").wantError(t, 404, apierr.NotFound)
	post := do(t, "POST", gw.url+"/docs", "")
	post.wantError(t, 405, apierr.MethodNotAllowed)
	if post.header.Get("Allow") != "GET" {
		t.Errorf("Allow = %q", post.header.Get("Allow"))
	}
	do(t, "GET", gw.url+"/api/vendor/v1/me", "").wantError(t, 401, apierr.InvalidAPIKey)
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	if me := do(t, "GET", gw.url+"/api/vendor/v1/me", key); me.status != 200 || me.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("vendor answer = %d, Cache-Control %q", me.status, me.header.Get("Cache-Control"))
	}

	m := scrape(t, gw)
	for _, want := range []string{
		`vendorgate_gateway_requests_total{method="GET",route="/docs",status="200"} 2`,
		`vendorgate_gateway_requests_total{method="GET",route="/docs",status="304"} 4`,
		`vendorgate_gateway_requests_total{method="GET",route="/openapi.yaml",status="200"} 1`,
		`vendorgate_gateway_requests_total{method="GET",route="/openapi.json",status="200"} 1`,
		`vendorgate_gateway_request_duration_seconds_count{route="/docs"} 6`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestDocsShowLimitsInForce: a reload re-renders the page, so it shows the
// limits enforced now, and the old ETag no longer validates.
func TestDocsShowLimitsInForce(t *testing.T) {
	gw := startGateway(t, newTestBackend(t), nil)
	before := do(t, "GET", gw.url+"/docs", "")
	c := *gw.cfg
	c.Limits.Vendor.Reads = config.Limit{Rate: 77, Period: 30 * time.Second}
	c.Limits.PerKey.Orders = config.Limit{Rate: 3, Period: time.Minute}
	c.FailedKeys.PerAddress = 42
	if err := gw.g.Reload(&c); err != nil {
		t.Fatal(err)
	}
	after := do(t, "GET", gw.url+"/docs", "", "If-None-Match", before.header.Get("ETag"))
	if after.status != 200 || after.header.Get("ETag") == before.header.Get("ETag") {
		t.Fatalf("after a reload: %d, ETag %s (was %s)", after.status, after.header.Get("ETag"), before.header.Get("ETag"))
	}
	page := string(after.body)
	for _, want := range []string{`&#34;reads&#34;;q=77;w=30`, `<code>key-orders</code>`, "more than 42 failed keys"} {
		if !strings.Contains(page, want) {
			t.Errorf("page after reload lacks %s", want)
		}
	}
	if strings.Contains(page, `q=5;w=60`) {
		t.Error("page still shows the old read limit")
	}
}

// TestDocsLimitedPerAddress: the documentation routes share one in-process
// budget per client address; past it, the 429 envelope with Retry-After,
// and vendor calls are not charged for it.
func TestDocsLimitedPerAddress(t *testing.T) {
	b := newTestBackend(t)
	gw := startGateway(t, b, func(o *Options) { o.Config.Docs.Rate, o.Config.Docs.Window = 3, time.Minute })
	for i, p := range []string{"/docs", "/openapi.yaml", "/openapi.json"} {
		if a := do(t, "GET", gw.url+p, ""); a.status != 200 {
			t.Fatalf("request %d (%s) = %d", i+1, p, a.status)
		}
	}
	a := do(t, "GET", gw.url+"/docs", "")
	a.wantError(t, 429, apierr.RateLimited)
	if ra := a.header.Get("Retry-After"); ra == "" || ra == "0" {
		t.Fatalf("Retry-After = %q", ra)
	}
	if a.header.Get("ETag") != "" {
		t.Fatal("a refusal carries the page's ETag")
	}
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	if me := do(t, "GET", gw.url+"/api/vendor/v1/me", key); me.status != 200 {
		t.Fatalf("a vendor call after the docs limit = %d", me.status)
	}
	if m := scrape(t, gw); !strings.Contains(m, `vendorgate_gateway_requests_total{method="GET",route="/docs",status="429"} 1`) {
		t.Error("the docs 429 is not counted under its route")
	}
}
