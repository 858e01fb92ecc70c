package gateway

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"vendorgate/config"
	"vendorgate/gateway/usage"
	"vendorgate/shared/testredis"
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
