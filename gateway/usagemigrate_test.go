package gateway

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"vendorgate/config"
	"vendorgate/gateway/usage"
	"vendorgate/shared/testredis"
	"vendorgate/shared/wire"
)

// TestUsageOfThePreviousFormatReadsUnderNames: a gateway starting on a
// Redis that holds usage of the previous format (counts by row index: 8
// policies of allowed, limited, shadow-limited each) moves it under the
// names of its table's rows, and the usage view shows it there: reads at
// index 0, the added policy "downloads" at index 4.
func TestUsageOfThePreviousFormatReadsUnderNames(t *testing.T) {
	const adminToken = "usage-admin-token-0123"
	rs := testredis.Start(t)
	minute := strconv.FormatInt(time.Now().Unix()/60, 10)
	old := make([]string, 8*3)
	for i := range old {
		old[i] = "0"
	}
	old[0], old[1], old[4*3] = "40", "2", "6" // reads allowed 40, limited 2; downloads allowed 6
	v := ""
	for i, s := range old {
		if i > 0 {
			v += " "
		}
		v += s
	}
	rs.Do(t, "HSET", "vgu:{usage}:v2:m:"+minute, "vendor-old", v)
	gw := startGateway(t, newTestBackend(t), func(o *Options) {
		o.Config.Redis.URL = config.List{rs.URL()}
		o.Config.AdminToken = adminToken
		o.Config.Limits.Policies = []config.Policy{{Name: "downloads", Scope: config.ScopeVendor, Class: "reports",
			Limit: config.Limit{Rate: 9, Period: time.Minute}}}
	})
	top := usageTop(t, gw, adminToken)
	got := map[string][2]uint64{}
	for _, r := range top.Rows {
		if r.VendorID == "vendor-old" {
			got[r.Limit] = [2]uint64{r.Allowed, r.Limited}
		}
	}
	if len(got) != 2 || got["reads"] != [2]uint64{40, 2} || got["downloads"] != [2]uint64{6, 0} {
		t.Fatalf("the previous format's usage reads %v; want reads 40/2 and downloads 6/0", got)
	}
}

// TestReloadOfAPolicyRow: a reload that puts another policy in a row's
// place
//   - stores what the old one counted under the old name in the usage
//     books (the counters are by row index until a flush names them: the
//     reload flushes first), and what the new one counts under its own;
//   - counts its decisions under the new name from the next request on
//     (the decision counters are resolved per row when the settings are
//     compiled, not looked up by name per request).
func TestReloadOfAPolicyRow(t *testing.T) {
	const adminToken = "usage-admin-token-0123"
	b := newTestBackend(t)
	gw := startGateway(t, b, func(o *Options) {
		o.Config.AdminToken = adminToken
		o.Config.Usage.FlushInterval = time.Minute // seldom on its own: the reload and the test flush
		o.Config.Limits.Policies = []config.Policy{{Name: "downloads-a", Scope: config.ScopeVendor, Class: "reports",
			Limit: config.Limit{Rate: 5, Period: time.Minute}}}
	})
	key, res := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	report := gw.url + "/api/vendor/v1/orders/o1/reports/mvr"
	if a := do(t, "GET", report, key); a.status != 200 {
		t.Fatalf("download: %d %s", a.status, a.body)
	}
	c := *gw.cfg
	c.Limits.Policies = []config.Policy{{Name: "downloads-b", Scope: config.ScopeVendor, Class: "reports",
		Limit: config.Limit{Rate: 5, Period: time.Minute}}}
	c.Version = "v2"
	if err := gw.g.Reload(&c); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if a := do(t, "GET", report, key); a.status != 200 {
			t.Fatalf("download after the reload: %d %s", a.status, a.body)
		}
	}
	gw.g.usage.Flush()
	top := usageTop(t, gw, adminToken)
	got := map[string]uint64{}
	for _, r := range top.Rows {
		if r.VendorID == res.VendorID {
			got[r.Limit] = r.Allowed
		}
	}
	if got["downloads-a"] != 1 || got["downloads-b"] != 2 || got["reads"] != 3 {
		t.Fatalf("allowed by policy %v; want downloads-a 1 (before the reload), downloads-b 2, reads 3", got)
	}
	m := scrape(t, gw)
	for _, want := range []string{
		`vendorgate_gateway_limiter_decisions_total{limit="downloads-a",outcome="allowed"} 1`,
		`vendorgate_gateway_limiter_decisions_total{limit="downloads-b",outcome="allowed"} 2`,
		`vendorgate_gateway_limiter_decisions_total{limit="reads",outcome="allowed"} 3`,
	} {
		if !strings.Contains(m, want+"\n") {
			t.Fatalf("metrics lack %s:\n%s", want, grep(m, "limiter_decisions"))
		}
	}
}

// usageTop reads the admin usage view of the last hour.
func usageTop(t *testing.T, gw *testGateway, adminToken string) usage.Top {
	t.Helper()
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
	return top
}
