package e2e

import (
	"errors"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// scrape returns the Prometheus text of an admin listener.
func scrape(t *testing.T, adminURL string) string {
	t.Helper()
	resp, err := http.Get(adminURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics = %d", resp.StatusCode)
	}
	return string(b)
}

// metric returns the value of the first series of name whose labels contain
// every one of labels ("k=\"v\""), or -1 when there is none.
func metric(text, name string, labels ...string) float64 {
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(line, l) {
				ok = false
			}
		}
		if !ok {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			return v
		}
	}
	return -1
}

func readyz(t *testing.T, adminURL string) (int, string) {
	t.Helper()
	resp, err := http.Get(adminURL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestMetricsReadinessAndRedisOutage drives real traffic, then stops and
// restarts the test's Redis, and reads what an SRE would read.
func TestMetricsReadinessAndRedisOutage(t *testing.T) {
	// Not parallel: it times the gateway's view of a Redis outage.
	s := newStack(t, stackOptions{redis: true})
	_, key := s.newVendor("sandbox", "mvr,psp")
	me := s.gwURLs[0] + "/api/vendor/v1/me"

	// GCRA emits a new token every period/rate (0.5 s at 120/min), so the
	// budget of the run is 120 plus what was emitted while it ran: read
	// until the first refusal (a slow machine emits more tokens meanwhile).
	admitted, limited := 0, 0
	start := time.Now()
	for i := 0; i < 400 && limited == 0; i++ {
		r := s.do("GET", me, key, nil, nil)
		switch r.status {
		case 200:
			admitted++
		case 429:
			limited++
			if r.errorCode() != "rate_limited" || r.header.Get("Retry-After") == "" {
				t.Fatalf("429 without rate_limited/Retry-After: %v %s", r.header, r.body)
			}
		default:
			t.Fatalf("read %d = %d %s", i, r.status, r.body)
		}
	}
	if limited == 0 {
		t.Fatalf("400 reads against 120/min: nothing was limited (%d admitted in %s)", admitted, time.Since(start))
	}
	budget := 120 + int(time.Since(start)/(500*time.Millisecond)) + 1
	if admitted < 120 || admitted > budget {
		t.Fatalf("reads against 120/min admitted %d before the first 429; want 120 to %d", admitted, budget)
	}
	bad := s.do("GET", me, "vgsandbx_"+strings.Repeat("Z", 43), nil, nil)
	if bad.status != 401 {
		t.Fatalf("unknown key = %d", bad.status)
	}

	m := scrape(t, s.gwAdmin[0])
	checks := []struct {
		name   string
		labels []string
		min    float64
	}{
		{"vendorgate_gateway_requests_total", []string{`route="/api/vendor/v1/me"`, `method="GET"`, `status="200"`}, 120},
		{"vendorgate_gateway_requests_total", []string{`route="/api/vendor/v1/me"`, `status="429"`}, 1},
		{"vendorgate_gateway_request_duration_seconds_count", []string{`route="/api/vendor/v1/me"`}, float64(admitted + limited + 1)}, // and the bad key
		{"vendorgate_gateway_upstream_duration_seconds_count", nil, 120},
		{"vendorgate_gateway_limiter_decisions_total", []string{`limit="reads"`, `outcome="allowed"`}, 120},
		{"vendorgate_gateway_limiter_decisions_total", []string{`limit="reads"`, `outcome="limited"`}, 1},
		{"vendorgate_gateway_redis_call_duration_seconds_count", nil, 1},
		{"vendorgate_gateway_key_cache_hits_total", nil, 100},
		{"vendorgate_gateway_key_cache_misses_total", nil, 1},
		{"vendorgate_gateway_auth_failures_total", nil, 1},
		{"vendorgate_gateway_breaker_state", nil, 0},
	}
	for _, c := range checks {
		if v := metric(m, c.name, c.labels...); v < c.min {
			t.Errorf("%s%v = %v, want at least %v", c.name, c.labels, v, c.min)
		}
	}
	if code, body := readyz(t, s.gwAdmin[0]); code != 200 {
		t.Fatalf("/readyz before the outage = %d %s", code, body)
	}

	// Redis goes away: every request fails closed, fast, and the SRE sees it.
	s.redis.Stop()
	_, key2 := s.newVendor("sandbox", "mvr")
	for i := 0; i < 5; i++ {
		start := time.Now()
		r := s.do("GET", me, key2, nil, nil)
		if r.status != 503 || r.errorCode() != "rate_limit_unavailable" || r.header.Get("Retry-After") == "" {
			t.Fatalf("with Redis stopped: %d %s %v", r.status, r.body, r.header)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("a request with Redis stopped took %s", d)
		}
	}
	m = scrape(t, s.gwAdmin[0])
	if v := metric(m, "vendorgate_gateway_limiter_decisions_total", `outcome="unavailable"`); v < 5 {
		t.Errorf("unavailable decisions = %v, want 5+", v)
	}
	if v := metric(m, "vendorgate_gateway_breaker_state", `breaker="redis"`); v != 2 {
		t.Errorf("redis breaker state = %v, want 2 (open)", v)
	}
	if code, body := readyz(t, s.gwAdmin[0]); code != 503 || !strings.Contains(strings.ToLower(body), "redis") {
		t.Fatalf("/readyz with Redis stopped = %d %s", code, body)
	}

	// Redis returns: the gateway heals itself, no restart.
	s.redis.Restart(t)
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, _ := readyz(t, s.gwAdmin[0])
		r := s.do("GET", me, key2, nil, nil)
		if code == 200 && r.status == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not recovered 15s after Redis returned: readyz %d, GET /me %d %s", code, r.status, r.body)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestSecretsNeverLogged runs a full exchange and searches every log.
func TestSecretsNeverLogged(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{redis: true})
	_, key := s.newVendor("sandbox", "mvr,psp")
	s.do("GET", s.gwURLs[0]+"/api/vendor/v1/me", key, nil, nil)
	s.do("GET", s.gwURLs[0]+"/api/vendor/v1/me", key[:len(key)-1]+"x", nil, nil)
	s.place(key, "D7654321", "mvr")
	// Malformed requests that carry the secrets: fasthttp's error text
	// quotes the bytes it read.
	for _, u := range []string{s.gwURLs[0], s.gwAdmin[0], s.backendURL, s.adminURL} {
		for _, hdr := range []string{"X-API-Key: " + key, "X-Internal-Token: " + internalToken, "Authorization: Bearer " + adminToken} {
			sendRaw(t, u, "GET /api/vendor/v1/me HTTP/1.1\r\nHost: g\r\n"+hdr+"\r\nBad Header Line\r\n\r\n")
		}
	}
	var logs string
	for deadline := time.Now().Add(5 * time.Second); ; {
		logs = s.backend.logText()
		for _, g := range s.gateways {
			logs += g.logText()
		}
		if strings.Count(logs, `"msg":"malformed request"`) >= 12 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(logs, "\"") {
		t.Fatal("no log lines were written at all")
	}
	if n := strings.Count(logs, `"msg":"malformed request"`); n < 12 {
		t.Errorf("%d log lines name a malformed request, want 12", n)
	}
	secret := key[9:]
	for name, v := range map[string]string{"api key": key, "key secret": secret, "internal token": internalToken, "admin token": adminToken} {
		if strings.Contains(logs, v) {
			t.Errorf("the %s appears in the logs", name)
		}
	}
	if !regexp.MustCompile(`"key_id":"[0-9a-f-]{36}"`).MatchString(logs) {
		t.Errorf("access log lines do not name the key id")
	}
}

// TestGracefulShutdownUnderLoad sends SIGTERM to the gateway during a
// bounded load: every request the gateway accepted is answered.
func TestGracefulShutdownUnderLoad(t *testing.T) {
	// Not parallel: it drains under its own bounded load.
	// The load opens a connection for each request, from one address:
	// max_new_conns_per_peer would refuse most of them.
	s := newStack(t, stackOptions{gatewayYAML: "limits:\n  vendor:\n    reads: {rate: 1000000, period: 1m}\nmax_new_conns_per_peer: 1000000\n"})
	_, key := s.newVendor("sandbox", "mvr")
	me := s.gwURLs[0] + "/api/vendor/v1/me"

	var (
		mu       sync.Mutex
		answered int
		refused  int
		dropped  []string
		wg       sync.WaitGroup
	)
	stop := make(chan struct{})
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			for i := 0; i < 5000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest("GET", me, nil)
				req.Header.Set("X-API-Key", key)
				resp, err := c.Do(req)
				mu.Lock()
				switch {
				case err == nil:
					_, rerr := io.ReadAll(resp.Body)
					resp.Body.Close()
					if rerr != nil || resp.StatusCode != 200 {
						dropped = append(dropped, "status "+strconv.Itoa(resp.StatusCode))
					} else {
						answered++
					}
				case errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET):
					// Not accepted: refused by the closed listener, or reset
					// while still in the kernel's backlog. The access log
					// below proves no handled request is among these.
					refused++
				default:
					dropped = append(dropped, err.Error())
				}
				mu.Unlock()
			}
		}()
	}
	time.Sleep(700 * time.Millisecond)
	if err := s.gateways[0].stop(t); err != nil {
		t.Errorf("gateway exit after SIGTERM: %v", err)
	}
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()
	if answered < 50 {
		t.Fatalf("only %d requests answered before shutdown: the load did not run", answered)
	}
	if refused == 0 {
		t.Fatalf("no request was refused after SIGTERM: did the gateway stop?")
	}
	if len(dropped) > 0 {
		t.Fatalf("%d accepted requests were not answered (of %d answered); first: %s", len(dropped), answered, dropped[0])
	}
	// Every request the gateway handled (one access line each) was answered.
	handled := 0
	status200 := regexp.MustCompile(`"status":"?200\b`)
	for _, line := range strings.Split(s.gateways[0].logText(), "\n") {
		if strings.Contains(line, `"route":"/api/vendor/v1/me"`) && status200.MatchString(line) {
			handled++
		}
	}
	if handled != answered {
		t.Fatalf("the gateway logged %d handled requests but clients received %d answers", handled, answered)
	}
}

// sendRaw writes raw to the server at base URL u as it is and reads until
// the server closes (a malformed request is answered 400, then closed).
func sendRaw(t *testing.T, u, raw string) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(u, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(c)
}

// TestReadyzWhileIdle: with no vendor request at all, the real gateway's
// /readyz turns 503 naming redis soon after Redis stops, the load
// balancers' form (?exclude=redis&exclude=backend) stays 200, and /readyz is
// 200 again soon after Redis returns.
func TestReadyzWhileIdle(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{redis: true})
	adm := s.gwAdmin[0]
	wait := func(query string, status int, name string) time.Duration {
		t.Helper()
		start := time.Now()
		for {
			code, body := readyzQuery(t, adm, query)
			if code == status && strings.Contains(body, name) {
				return time.Since(start)
			}
			if time.Since(start) > 10*time.Second {
				t.Fatalf("/readyz%s still %d %s after 10s, want %d naming %q", query, code, body, status, name)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	wait("", 200, "ready")

	s.redis.Stop()
	d := wait("", 503, `"redis"`)
	t.Logf("redis stopped, no traffic: /readyz 503 after %s", d)
	if code, body := readyzQuery(t, adm, "?verbose"); code != 503 || !strings.Contains(body, `"name":"draining","status":"ok"`) {
		t.Fatalf("/readyz?verbose: %d %s", code, body)
	}
	if code, body := readyzQuery(t, adm, "?exclude=redis&exclude=backend"); code != 200 {
		t.Fatalf("the load balancers' form with Redis stopped: %d %s", code, body)
	}
	if v := metric(scrape(t, adm), "vendorgate_gateway_requests_total"); v > 0 {
		t.Fatalf("%v vendor requests counted; the test sent none", v)
	}
	s.redis.Restart(t)
	d = wait("", 200, "ready")
	t.Logf("redis restarted, no traffic: /readyz 200 after %s", d)
}

func readyzQuery(t *testing.T, adminURL, query string) (int, string) {
	t.Helper()
	resp, err := http.Get(adminURL + "/readyz" + query)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
