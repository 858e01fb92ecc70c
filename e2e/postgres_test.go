package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"vendorgate/shared/testpg"
	"vendorgate/shared/testredis"
)

// pgPair is two backend replicas on one PostgreSQL database.
type pgPair struct {
	dbURL   string
	procs   [2]*proc
	urls    [2]string // vendor and internal listeners
	admins  [2]string // admin listeners
	reports string
}

// pgStartPair starts two backends at the same moment on an empty database,
// so that both apply the migrations at once. They share one reports
// directory, as replicas must (a report PDF written by one is served by
// the other).
func pgStartPair(t *testing.T, env map[string]string) *pgPair {
	t.Helper()
	srv := testpg.Start(t)
	p := &pgPair{dbURL: srv.CreateDB(t, "replicas"), reports: filepath.Join(t.TempDir(), "reports")}
	for i := range 2 {
		port, aport := testredis.FreePort(t), testredis.FreePort(t)
		p.urls[i] = "http://127.0.0.1:" + strconv.Itoa(port)
		p.admins[i] = "http://127.0.0.1:" + strconv.Itoa(aport)
		benv := map[string]string{
			"BACKEND_LISTEN":         "127.0.0.1:" + strconv.Itoa(port),
			"BACKEND_ADMIN_LISTEN":   "127.0.0.1:" + strconv.Itoa(aport),
			"BACKEND_DATABASE":       p.dbURL,
			"BACKEND_REPORTS_DIR":    p.reports,
			"BACKEND_INTERNAL_TOKEN": internalToken,
			"BACKEND_ADMIN_TOKEN":    adminToken,
		}
		benv["BACKEND_KEY_SIGNING_SECRETS"] = signingSecret
		for k, v := range env {
			benv[k] = v
		}
		p.procs[i] = startProc(t, "backend", benv)
	}
	for i := range 2 {
		waitHTTP(t, p.admins[i]+"/healthz", p.procs[i])
	}
	return p
}

// pgAdmin calls a backend's admin API and decodes the answer into out.
func pgAdmin(t *testing.T, adminURL, method, path string, body any, want int, out any) {
	t.Helper()
	var b []byte
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			t.Fatal(err)
		}
	}
	r := do(t, method, adminURL+path, "", b, map[string]string{"Authorization": "Bearer " + adminToken})
	if r.status != want {
		t.Fatalf("%s %s = %d %s, want %d", method, path, r.status, r.body, want)
	}
	if out != nil {
		decode(t, string(r.body), out)
	}
}

type pgKey struct {
	Key   string `json:"key"`
	KeyID string `json:"key_id"`
}

// pgVendor creates, approves and keys a sandbox vendor with every service
// through one backend's admin API.
func pgVendor(t *testing.T, adminURL, name string) (vendorID string, key pgKey) {
	t.Helper()
	var v struct {
		VendorID string `json:"vendor_id"`
		Status   string `json:"status"`
	}
	pgAdmin(t, adminURL, "POST", "/admin/v1/vendors", map[string]any{"company_name": name, "environment": "sandbox",
		"enabled_services": []string{"mvr", "psp", "cdlis", "driver_reviews"}}, 201, &v)
	pgAdmin(t, adminURL, "POST", "/admin/v1/vendors/"+v.VendorID+"/approve", nil, 200, &v)
	if v.Status != "approved" {
		t.Fatalf("vendor not approved: %+v", v)
	}
	pgAdmin(t, adminURL, "POST", "/admin/v1/vendors/"+v.VendorID+"/keys", map[string]any{}, 201, &key)
	return v.VendorID, key
}

// pgIdentity is what a gateway sends a backend for this vendor's key.
func pgIdentity(vendorID string, key pgKey, idem string) map[string]string {
	h := map[string]string{"X-Internal-Token": internalToken, "X-Vendor-Id": vendorID, "X-Key-Id": key.KeyID,
		"X-Vendor-Environment": "sandbox"}
	if idem != "" {
		h["Idempotency-Key"] = idem
	}
	return h
}

func pgOrderBody(license string) []byte {
	return fmt.Appendf(nil, `{"mc_number":"MC-0012345","driver":{"first_name":"Ann","last_name":"Lee","date_of_birth":"1980-02-03","license_number":%q,"license_state":"TX"},"services":["mvr","psp","cdlis","driver_reviews"]}`, license)
}

type pgOrder struct {
	OrderID  string `json:"order_id"`
	Status   string `json:"status"`
	Final    bool   `json:"final"`
	Services []struct {
		Service string  `json:"service"`
		Status  string  `json:"status"`
		Reason  *string `json:"reason"`
		FileURL *string `json:"file_url"`
	} `json:"services"`
}

// pgSum adds every series of the metric name whose line contains all of
// labels.
func pgSum(t *testing.T, adminURL, name string, labels ...string) float64 {
	t.Helper()
	resp, err := http.Get(adminURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	sum := 0.0
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		match := true
		for _, l := range labels {
			match = match && strings.Contains(line, l)
		}
		if !match {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// pgExpectedSteps is what the sandbox provider does to an order of all four
// services, by the license's last four characters (the table of docs/api.md, "Sandbox test values"):
// every step as "service outcome".
func pgExpectedSteps(suffix string) []string {
	all := []string{"mvr", "psp", "cdlis", "driver_reviews"}
	var out []string
	for _, svc := range all {
		switch {
		case suffix == "0007":
		case suffix == "0005":
			out = append(out, svc+" failed")
		case suffix == "0001" && svc == "mvr":
			out = append(out, svc+" failed")
		case suffix == "0006" && svc != "driver_reviews":
			out = append(out, svc+" report_unavailable", svc+" completed")
		default:
			out = append(out, svc+" completed")
		}
	}
	return out
}

// TestPostgresTwoReplicas runs two backend processes on one PostgreSQL
// database and proves they behave as one backend: each sandbox step and
// each deadline close happens once across both, one Idempotency-Key fired
// at both at the same moment places one order, and a gateway balancing
// over both keeps answering when one dies.
func TestPostgresTwoReplicas(t *testing.T) {
	// Not parallel: each order's simulator steps must all land within its 4 s order deadline.
	p := pgStartPair(t, map[string]string{
		"BACKEND_SANDBOX_DELAY":  "100ms",
		"BACKEND_SWEEP_INTERVAL": "100ms",
		"BACKEND_ORDER_DEADLINE": "4s",
	})
	a, b := 0, 1

	t.Run("EachStepAndCloseOnce", func(t *testing.T) {
		vendorID, key := pgVendor(t, p.admins[a], "Replica Steps Inc")
		suffixes := []string{"1234", "0001", "0005", "0006", "0007", "0008", "4321", "0006", "0007", "1111"}
		want := map[string]float64{}
		wantSteps, wantClosed := 0.0, 0.0
		type placed struct{ id, suffix string }
		var orders []placed
		for i := range 20 {
			suffix := suffixes[i%len(suffixes)]
			r := do(t, "POST", p.urls[a]+"/api/vendor/v1/orders", "", pgOrderBody(fmt.Sprintf("DL%02d%s", i, suffix)),
				pgIdentity(vendorID, key, fmt.Sprintf("steps-%d", i)))
			if r.status != 202 {
				t.Fatalf("place order %d on backend A = %d %s", i, r.status, r.body)
			}
			var o pgOrder
			decode(t, string(r.body), &o)
			orders = append(orders, placed{o.OrderID, suffix})
			for _, s := range pgExpectedSteps(suffix) {
				want[s]++
				wantSteps++
			}
			if suffix == "0007" {
				wantClosed++
			}
		}

		// Every order ends, read through backend B.
		deadline := time.Now().Add(30 * time.Second)
		for _, o := range orders {
			var got pgOrder
			for {
				r := do(t, "GET", p.urls[b]+"/api/vendor/v1/orders/"+o.id, "", nil, pgIdentity(vendorID, key, ""))
				decode(t, string(r.body), &got)
				if got.Final {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("order %s (license ...%s) not final: %s", o.id, o.suffix, r.body)
				}
				time.Sleep(50 * time.Millisecond)
			}
			wantStatus := map[string]string{"0001": "partially_completed", "0005": "failed", "0007": "failed"}[o.suffix]
			if wantStatus == "" {
				wantStatus = "completed"
			}
			if got.Status != wantStatus {
				t.Errorf("order ...%s ended %s, want %s", o.suffix, got.Status, wantStatus)
			}
			for _, sv := range got.Services {
				if o.suffix == "0007" && (sv.Reason == nil || *sv.Reason != "timed_out") {
					t.Errorf("stalled order's %s ended %s %v, want failed timed_out", sv.Service, sv.Status, sv.Reason)
				}
				// A report one replica wrote is served by the other.
				if sv.FileURL != nil {
					rr := do(t, "GET", p.urls[b]+"/api/vendor/v1/orders/"+o.id+"/reports/"+sv.Service, "", nil, pgIdentity(vendorID, key, ""))
					if rr.status != 200 || !bytes.HasPrefix(rr.body, []byte("%PDF")) {
						t.Errorf("report %s of order ...%s through B = %d", sv.Service, o.suffix, rr.status)
					}
				}
			}
		}

		// The counters move just after the commit the order read saw: give
		// them a moment, then hold still for many ticks and sweeps to show
		// that nothing counts twice afterwards.
		read := func() (steps, closed [2]float64, by map[string]float64) {
			by = map[string]float64{}
			for i, adm := range p.admins {
				steps[i] = pgSum(t, adm, "vendorgate_backend_simulator_steps_total")
				closed[i] = pgSum(t, adm, "vendorgate_backend_sweeper_orders_closed_total")
				for k := range want {
					svc, outcome, _ := strings.Cut(k, " ")
					by[k] += pgSum(t, adm, "vendorgate_backend_simulator_steps_total", `service="`+svc+`"`, `outcome="`+outcome+`"`)
				}
			}
			return steps, closed, by
		}
		var steps, closed [2]float64
		var by map[string]float64
		for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			steps, closed, _ = read()
			if steps[a]+steps[b] >= wantSteps && closed[a]+closed[b] >= wantClosed {
				break
			}
		}
		time.Sleep(time.Second) // 10 sweeps and ~100 simulator ticks on each replica
		steps, closed, by = read()
		t.Logf("simulator steps: backend A %.0f, backend B %.0f (want %.0f in all); orders closed: A %.0f, B %.0f (want %.0f)",
			steps[a], steps[b], wantSteps, closed[a], closed[b], wantClosed)
		if steps[a]+steps[b] != wantSteps {
			t.Errorf("the replicas took %.0f simulator steps between them, want exactly %.0f", steps[a]+steps[b], wantSteps)
		}
		if closed[a]+closed[b] != wantClosed {
			t.Errorf("the replicas closed %.0f orders at the deadline between them, want exactly the %.0f stalled ones", closed[a]+closed[b], wantClosed)
		}
		for k, n := range want {
			if by[k] != n {
				t.Errorf("steps %q: %.0f across both replicas, want %.0f", k, by[k], n)
			}
		}
		if created := pgSum(t, p.admins[a], "vendorgate_backend_orders_created_total"); created != 20 {
			t.Errorf("backend A counted %.0f orders created, want 20", created)
		}
	})

	t.Run("OneIdempotencyKeyOnBothAtOnce", func(t *testing.T) {
		vendorID, key := pgVendor(t, p.admins[b], "Replica Idempotency Inc")
		const rounds, perReplica = 30, 2
		replays, inProgress := 0, 0
		for round := range rounds {
			idem := fmt.Sprintf("same-moment-%d", round)
			body := pgOrderBody(fmt.Sprintf("DL%04d1234", round))
			type answer struct {
				replica int
				status  int
				body    []byte
				retry   string
				err     error
			}
			answers := make([]answer, 2*perReplica)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range answers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					replica := i % 2
					req, err := http.NewRequest("POST", p.urls[replica]+"/api/vendor/v1/orders", bytes.NewReader(body))
					if err != nil {
						answers[i].err = err
						return
					}
					req.Header.Set("Content-Type", "application/json")
					for k, v := range pgIdentity(vendorID, key, idem) {
						req.Header.Set(k, v)
					}
					<-start
					resp, err := client.Do(req)
					if err != nil {
						answers[i].err = err
						return
					}
					defer resp.Body.Close()
					rb, _ := io.ReadAll(resp.Body)
					answers[i] = answer{replica: replica, status: resp.StatusCode, body: rb, retry: resp.Header.Get("Retry-After")}
				}()
			}
			close(start)
			wg.Wait()
			ids := map[string]bool{}
			accepted := 0
			for _, ans := range answers {
				switch {
				case ans.err != nil:
					t.Fatalf("round %d: %v", round, ans.err)
				case ans.status == 202:
					var o pgOrder
					decode(t, string(ans.body), &o)
					ids[o.OrderID] = true
					accepted++
				case ans.status == 409 && strings.Contains(string(ans.body), `"in_progress"`):
					inProgress++
					if ans.retry == "" {
						t.Errorf("round %d: in_progress without Retry-After", round)
					}
				default:
					t.Fatalf("round %d: replica %d answered %d %s, want 202 (placed or replayed) or 409 in_progress", round, ans.replica, ans.status, ans.body)
				}
			}
			if len(ids) != 1 {
				t.Fatalf("round %d: the same Idempotency-Key on both replicas gave orders %v, want exactly one", round, ids)
			}
			replays += accepted - 1
		}
		t.Logf("%d rounds of %d simultaneous requests: %d replays, %d in_progress, one order each round", rounds, 2*perReplica, replays, inProgress)
		// The database holds one order per round, whichever replica asks.
		for _, u := range p.urls {
			r := do(t, "GET", u+"/api/vendor/v1/orders?limit=200", "", nil, pgIdentity(vendorID, key, ""))
			var list struct {
				Orders []pgOrder `json:"orders"`
			}
			decode(t, string(r.body), &list)
			if r.status != 200 || len(list.Orders) != rounds {
				t.Errorf("%s lists %d orders (status %d), want %d: one per Idempotency-Key", u, len(list.Orders), r.status, rounds)
			}
		}
	})

	t.Run("GatewayOverBothSurvivesOne", func(t *testing.T) {
		vendorID, _ := pgVendor(t, p.admins[a], "Replica Gateway Inc")
		// The key is issued by the other replica: both read one database.
		var key pgKey
		pgAdmin(t, p.admins[b], "POST", "/admin/v1/vendors/"+vendorID+"/keys", map[string]any{}, 201, &key)
		port, admin := testredis.FreePort(t), "127.0.0.1:"+strconv.Itoa(testredis.FreePort(t))
		gw := startProc(t, "gateway", map[string]string{
			"GATEWAY_LISTEN":         "127.0.0.1:" + strconv.Itoa(port),
			"GATEWAY_ADMIN_LISTEN":   admin,
			"GATEWAY_BACKEND_URL":    p.urls[a] + "," + p.urls[b],
			"GATEWAY_INTERNAL_TOKEN": internalToken,
			// The backends sign keys with it; the gateway verifies them.
			"GATEWAY_KEY_SIGNING_SECRETS": signingSecret,
		})
		waitHTTP(t, "http://"+admin+"/healthz", gw)
		me := "http://127.0.0.1:" + strconv.Itoa(port) + "/api/vendor/v1/me"
		served := func(i int) float64 {
			return pgSum(t, p.admins[i], "vendorgate_backend_requests_total", `route="/api/vendor/v1/me"`)
		}
		for i := range 8 {
			r := do(t, "GET", me, key.Key, nil, nil)
			if r.status != 200 || !strings.Contains(string(r.body), vendorID) {
				t.Fatalf("GET /me %d through the gateway = %d %s", i, r.status, r.body)
			}
		}
		beforeA, beforeB := served(a), served(b)
		t.Logf("8 reads of /me through the gateway: backend A served %.0f, backend B %.0f", beforeA, beforeB)
		if beforeA == 0 || beforeB == 0 {
			t.Errorf("the gateway did not balance over both backends (A %.0f, B %.0f)", beforeA, beforeB)
		}

		p.procs[a].killed = true
		if err := p.procs[a].cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		<-p.procs[a].done
		// Until its breaker opens, a request may land on the dead replica;
		// after that, every read is answered by B.
		run, failures := 0, 0
		for i := 0; i < 200 && run < 20; i++ {
			r := do(t, "GET", me, key.Key, nil, nil)
			if r.status == 200 {
				run++
				continue
			}
			run = 0
			failures++
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("after backend A was killed: %d failed reads before 20 in a row succeeded", failures)
		if run < 20 {
			t.Fatalf("with backend A dead the gateway did not answer 20 reads in a row (%d failures)", failures)
		}
		if after := served(b); after < beforeB+20 {
			t.Errorf("backend B served %.0f reads of /me after A died, want at least 20", after-beforeB)
		}
	})
}
