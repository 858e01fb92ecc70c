package e2e

import (
	"encoding/csv"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// monthReport is `vendorctl usage month -o json`.
type monthReport struct {
	Month   string `json:"month"`
	Vendors []struct {
		VendorID    string         `json:"vendor_id"`
		CompanyName string         `json:"company_name"`
		Services    []monthService `json:"services"`
		Requests    []monthPolicy  `json:"requests"`
	} `json:"vendors"`
}

type monthService struct {
	Environment string `json:"environment"`
	Service     string `json:"service"`
	Ordered     int64  `json:"ordered"`
	Completed   int64  `json:"completed"`
	Failed      int64  `json:"failed"`
	NoRecord    int64  `json:"no_record"`
	Held        int64  `json:"held"`
	Billable    int64  `json:"billable"`
}

type monthPolicy struct {
	Policy        string `json:"policy"`
	Requests      int64  `json:"requests"`
	Allowed       int64  `json:"allowed"`
	Limited       int64  `json:"limited"`
	ShadowLimited int64  `json:"shadow_limited"`
}

// TestUsageMonthEndToEnd: orders placed through the real gateway, some
// completed by the sandbox, one failed no_record, one held, one refused by
// the orders limit, one live order completed by an operator; then
// `vendorctl usage month` (csv and json) gives exactly those services by
// environment, and the gateway's requests and refusals by limit once its
// usage flush has reached the backend.
func TestUsageMonthEndToEnd(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{gateways: 1,
		gatewayEnv: map[string]string{"GATEWAY_USAGE_FLUSH_INTERVAL": "1s"},
		gatewayYAML: `limits:
  vendor:
    orders: {rate: 4, period: 10m}
`})
	sv, sk := s.newVendor("sandbox", "mvr,psp")
	lv, lk := s.newVendor("live", "mvr")
	reads := map[string]int64{}
	// wait reads the order through the gateway until cond holds, counting
	// each read as the gateway does.
	wait := func(vendor, key, id string, cond func(order) bool) order {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			r := s.do("GET", s.gwURLs[0]+"/api/vendor/v1/orders/"+id, key, nil, nil)
			reads[vendor]++
			if r.status != 200 && r.status != 202 {
				t.Fatalf("read %s = %d %s", id, r.status, r.body)
			}
			var o order
			decode(t, string(r.body), &o)
			if cond(o) {
				return o
			}
			if time.Now().After(deadline) {
				t.Fatalf("order %s never reached the state: %s", id, r.body)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	settled := func(o order) bool {
		for _, sv := range o.Services {
			if sv.Status == "processing" {
				return false
			}
		}
		return true
	}
	var ids []string
	for _, p := range []struct {
		license  string
		services []string
	}{{"D1230000", []string{"mvr", "psp"}}, {"D1230001", []string{"mvr", "psp"}}, {"D1230003", []string{"mvr"}}, {"D1230005", []string{"mvr"}}} {
		ids = append(ids, s.place(sk, p.license, p.services...).OrderID)
	}
	for _, lic := range []string{"D1230006", "D1230007"} { // past the orders limit
		r := s.do("POST", s.gwURLs[0]+"/api/vendor/v1/orders", sk, orderBody(lic, "mvr"), map[string]string{"Idempotency-Key": "idem-" + lic})
		if r.status != http.StatusTooManyRequests {
			t.Fatalf("order past the limit: %d %s", r.status, r.body)
		}
	}
	for _, id := range ids {
		wait(sv, sk, id, settled)
	}
	// The live order: completed by an operator.
	live := s.place(lk, "L7654321", "mvr").OrderID
	pdf := filepath.Join(t.TempDir(), "small.pdf")
	if err := os.WriteFile(pdf, []byte("%PDF-1.4\n%%EOF\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.mustVendorctl("order", "complete", live, "--service", "mvr", "--file", pdf)
	wait(lv, lk, live, func(o order) bool { return o.Final })

	month := time.Now().UTC().Format("2006-01")
	wantReq := map[string][]monthPolicy{
		sv: {{Policy: "orders", Requests: 6, Allowed: 4, Limited: 2}, {Policy: "reads", Requests: reads[sv], Allowed: reads[sv]}},
		lv: {{Policy: "orders", Requests: 1, Allowed: 1}, {Policy: "reads", Requests: reads[lv], Allowed: reads[lv]}},
	}
	// The gateway flushes every second; the month report has its requests
	// once the flush reached the backend.
	var r monthReport
	deadline := time.Now().Add(15 * time.Second)
	for {
		r = monthReport{}
		decode(t, s.mustVendorctl("-o", "json", "usage", "month", "--all"), &r)
		if len(r.Vendors) == 2 && samePolicies(r.Vendors[0].Requests, wantReq[r.Vendors[0].VendorID]) &&
			samePolicies(r.Vendors[1].Requests, wantReq[r.Vendors[1].VendorID]) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the month's requests never reached %+v: %+v", wantReq, r)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if r.Month != month {
		t.Errorf("month %q, want %q", r.Month, month)
	}
	wantSvc := map[string][]monthService{
		sv: {{Environment: "sandbox", Service: "mvr", Ordered: 4, Completed: 1, Failed: 2, NoRecord: 1, Held: 1, Billable: 2},
			{Environment: "sandbox", Service: "psp", Ordered: 2, Completed: 2, Billable: 2}},
		lv: {{Environment: "live", Service: "mvr", Ordered: 1, Completed: 1, Billable: 1}},
	}
	for _, v := range r.Vendors {
		if len(v.Services) != len(wantSvc[v.VendorID]) {
			t.Errorf("%s's services = %+v, want %+v", v.VendorID, v.Services, wantSvc[v.VendorID])
			continue
		}
		for i := range v.Services {
			if v.Services[i] != wantSvc[v.VendorID][i] {
				t.Errorf("%s's services = %+v, want %+v", v.VendorID, v.Services, wantSvc[v.VendorID])
			}
		}
	}

	out := s.mustVendorctl("usage", "month", sv, "--month", month, "-o", "csv")
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatalf("not csv: %v\n%s", err, out)
	}
	n := func(v int64) string { return strconv.FormatInt(v, 10) }
	want := []string{
		"month,vendor_id,company_name,record,environment,service,ordered,completed,failed,no_record,held,billable,policy,requests,allowed,limited,shadow_limited",
		month + "," + sv + ",Acme sandbox,service,sandbox,mvr,4,1,2,1,1,2,,,,,",
		month + "," + sv + ",Acme sandbox,service,sandbox,psp,2,2,0,0,0,2,,,,,",
		month + "," + sv + ",Acme sandbox,requests,,,,,,,,,orders,6,4,2,0",
		month + "," + sv + ",Acme sandbox,requests,,,,,,,,,reads," + n(reads[sv]) + "," + n(reads[sv]) + ",0,0",
	}
	var got []string
	for _, row := range rows {
		got = append(got, strings.Join(row, ","))
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("csv:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func samePolicies(got, want []monthPolicy) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}
