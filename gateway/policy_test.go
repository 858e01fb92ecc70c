package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"vendorgate/config"
	"vendorgate/gateway/usage"
	"vendorgate/shared/apierr"
	"vendorgate/shared/wire"
)

// TestAddedPolicy adds a limit policy as an operator would, one row of
// configuration: report downloads, 2 a minute per vendor, counting the
// routes of class "reports". Without another change it is enforced on the
// report route (and only there), named in the RateLimit headers and on the
// docs page, and counted in the usage view under its name.
func TestAddedPolicy(t *testing.T) {
	const adminToken = "usage-admin-token-0123"
	limiterModes(t, func(t *testing.T, withRedis func(*Options)) {
		b := newTestBackend(t)
		gw := startGateway(t, b, func(o *Options) {
			withRedis(o)
			o.Config.AdminToken = adminToken
			o.Config.Limits.Policies = []config.Policy{{Name: "report-downloads", Scope: config.ScopeVendor, Class: "reports",
				Limit: config.Limit{Rate: 2, Period: time.Minute}}}
		})
		key, res := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
		report := gw.url + "/api/vendor/v1/orders/o1/reports/mvr"

		for i := 0; i < 2; i++ {
			a := do(t, "GET", report, key)
			if a.status != 200 {
				t.Fatalf("download %d: %d %s", i, a.status, a.body)
			}
			if p := a.header.Get("RateLimit-Policy"); p != `"reads";q=5;w=60, "report-downloads";q=2;w=60` {
				t.Fatalf("download %d RateLimit-Policy %q", i, p)
			}
		}
		a := do(t, "GET", report, key)
		a.wantError(t, 429, apierr.RateLimited)
		retryAfter(t, a)
		if rl := a.header.Get("RateLimit"); !strings.Contains(rl, `"report-downloads";r=0;`) {
			t.Fatalf("refused download RateLimit %q", rl)
		}
		// The refusal took no read token (a decision is all-or-nothing):
		// its reads entry says what is left, 5 - 2, not one fewer.
		if rl := a.header.Get("RateLimit"); !strings.HasPrefix(rl, `"reads";r=3;`) {
			t.Fatalf("refused download RateLimit %q: reads' remaining counts a token the refusal did not take", rl)
		}
		// Reads are not report downloads: the vendor still reads, and the
		// refused download charged nothing (5 - 2 - this one).
		me := do(t, "GET", gw.url+"/api/vendor/v1/me", key)
		if me.status != 200 || me.header.Get("RateLimit-Policy") != `"reads";q=5;w=60` || !strings.HasPrefix(me.header.Get("RateLimit"), `"reads";r=2;`) {
			t.Fatalf("read after the refused download: %d %q %q", me.status, me.header.Get("RateLimit-Policy"), me.header.Get("RateLimit"))
		}

		page := do(t, "GET", gw.url+"/docs", "")
		if page.status != 200 || !strings.Contains(string(page.body), "report-downloads") {
			t.Fatalf("docs page does not list the policy: %d", page.status)
		}

		gw.g.usage.Flush()
		req, _ := http.NewRequest("GET", gw.admin+"/usage?window=1h", nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var top usage.Top
		if err := json.NewDecoder(resp.Body).Decode(&top); err != nil {
			t.Fatal(err)
		}
		counts := map[string][2]uint64{}
		for _, r := range top.Rows {
			if r.VendorID == res.VendorID {
				counts[r.Limit] = [2]uint64{r.Allowed, r.Limited}
			}
		}
		// Each policy counts what it decided: reads allowed the refused
		// download too.
		if counts["report-downloads"] != [2]uint64{2, 1} || counts["reads"] != [2]uint64{4, 0} {
			t.Fatalf("usage (allowed, limited) by policy: %v", counts)
		}
	})
}

// A row naming a class no route counts is refused at start, not ignored.
func TestPolicyOfUnknownClassRefused(t *testing.T) {
	c := testConfig(newTestBackend(t))
	c.Limits.Policies = []config.Policy{{Name: "typo", Scope: config.ScopeVendor, Class: "raeds", Limit: config.Limit{Rate: 2, Period: time.Minute}}}
	if _, err := New(Options{Config: c}); err == nil || !strings.Contains(err.Error(), `class "raeds"`) ||
		!strings.Contains(err.Error(), "orders, reads, reports") {
		t.Fatalf("New = %v, want the unknown class named and the classes that exist listed", err)
	}
}
