package gateway

import (
	"encoding/json"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"vendorgate/config"
	"vendorgate/shared/apierr"
	"vendorgate/shared/testlog"
	"vendorgate/shared/testredis"
)

func TestReload(t *testing.T) {
	_, gw, key, _ := startWithKey(t)
	me := gw.url + "/api/vendor/v1/me"
	if a := do(t, "GET", me, key); a.header.Get("RateLimit-Policy") != `"reads";q=5;w=60` {
		t.Fatalf("policy %q", a.header.Get("RateLimit-Policy"))
	}
	s := *gw.cfg
	s.Limits.Vendor.Reads = config.Limit{Rate: 50, Period: time.Minute}
	s.Version = "v2"
	if err := gw.g.Reload(&s); err != nil {
		t.Fatal(err)
	}
	if a := do(t, "GET", me, key); a.status != 200 || a.header.Get("RateLimit-Policy") != `"reads";q=50;w=60` {
		t.Fatalf("after reload: %d %q", a.status, a.header.Get("RateLimit-Policy"))
	}
	bad := s
	bad.Limits.Vendor.Reads = config.Limit{Rate: -1, Period: time.Minute}
	if err := gw.g.Reload(&bad); err == nil {
		t.Fatal("a bad configuration was accepted")
	}
	if a := do(t, "GET", me, key); a.header.Get("RateLimit-Policy") != `"reads";q=50;w=60` {
		t.Fatalf("bad reload changed the policy: %q", a.header.Get("RateLimit-Policy"))
	}
	m := scrape(t, gw)
	for _, want := range []string{`vendorgate_gateway_config_reloads_total{result="ok"} 1`, `vendorgate_gateway_config_reloads_total{result="error"} 1`,
		`vendorgate_gateway_config_info{version="v2"} 1`} {
		if !strings.Contains(m, want) {
			t.Fatalf("metrics lack %s", want)
		}
	}
	if strings.Contains(m, `config_info{version="test"}`) {
		t.Fatal("old config version still exported")
	}
}

func TestMetricsAndReadiness(t *testing.T) {
	b, gw, key, _ := startWithKey(t)
	do(t, "GET", gw.url+"/api/vendor/v1/orders/abc", key)
	do(t, "GET", gw.url+"/api/vendor/v1/orders/abc", key)
	do(t, "GET", gw.url+"/nope", "")
	do(t, "GET", gw.url+"/api/vendor/v1/me", "")
	m := scrape(t, gw)
	for _, want := range []string{
		`vendorgate_gateway_requests_total{method="GET",route="/api/vendor/v1/orders/{order_id}",status="200"} 2`,
		`vendorgate_gateway_requests_total{method="GET",route="unmatched",status="404"} 1`,
		`vendorgate_gateway_request_duration_seconds_bucket{route="/api/vendor/v1/me"`,
		`vendorgate_gateway_upstream_duration_seconds_bucket{backend="` + b.addr + `"`,
		`vendorgate_gateway_limiter_decisions_total{limit="reads",outcome="allowed"} 2`,
		`vendorgate_gateway_auth_failures_total{reason="missing"} 1`,
		`vendorgate_gateway_key_cache_hits_total 1`,
		`vendorgate_gateway_key_cache_misses_total 1`,
		`vendorgate_gateway_key_cache_evictions_total 0`,
		`vendorgate_gateway_key_cache_invalidations_total 0`,
		`vendorgate_gateway_breaker_state{breaker="key_lookup"} 0`,
		`vendorgate_gateway_config_info{version="test"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if a := do(t, "GET", gw.admin+"/readyz", ""); a.status != 200 {
		t.Fatalf("readyz %d %s", a.status, a.body)
	}
	if a := do(t, "GET", gw.admin+"/healthz", ""); a.status != 200 {
		t.Fatalf("healthz %d", a.status)
	}
	gw.g.draining.Store(true)
	if a := do(t, "GET", gw.admin+"/readyz", ""); a.status != 503 || !strings.Contains(string(a.body), "draining") {
		t.Fatalf("readyz while draining: %d %s", a.status, a.body)
	}
	gw.g.draining.Store(false)
}

// FuzzRouter: whatever the path and method, the answer is an envelope or a
// proxied answer, never a redirect, and always carries the common headers.
func FuzzRouter(f *testing.F) {
	b := newTestBackend(f)
	gw := startGateway(f, b, nil)
	h := gw.g.Handler()
	for _, s := range []string{"/api/vendor/v1/me", "/api/vendor/v1/orders/x/reports/mvr", "/api/vendor/", "//", "/api/vendor/v1/orders/%2e%2e", "/api/vendor/v1/me/",
		"/docs", "/openapi.json", "/docs/", "/DOCS", "/openapi.yaml/../api/vendor/v1/me"} {
		f.Add("GET", s)
		f.Add("POST", s)
	}
	f.Fuzz(func(t *testing.T, method, path string) {
		var ctx fasthttp.RequestCtx
		ctx.Request.Header.SetMethod(method)
		ctx.Request.SetRequestURI(path)
		h(&ctx)
		st := ctx.Response.StatusCode()
		if st >= 300 && st < 400 {
			t.Fatalf("%s %q redirected (%d)", method, path, st)
		}
		// Every /api/vendor/ answer and every error is no-store; only the
		// documentation routes' own answers are cacheable.
		cc := string(ctx.Response.Header.Peek("Cache-Control"))
		if len(ctx.Response.Header.Peek("X-Request-Id")) == 0 ||
			(strings.HasPrefix(string(ctx.Request.URI().Path()), "/api/vendor/") || st >= 400) && cc != "no-store" {
			t.Fatalf("%s %q: common headers missing (Cache-Control %q)", method, path, cc)
		}
		if st >= 400 {
			if d, ok := apierr.Parse(ctx.Response.Body()); !ok || d.Code.Status() != st && d.Code != apierr.RequestFailed {
				t.Fatalf("%s %q: %d %s", method, path, st, ctx.Response.Body())
			}
		}
	})
}

// TestReloadLogsWhatChanged: a reload logs each setting that changed with
// its old and new values, those it applied apart from those that wait for
// a restart; a secret (the internal token, a Redis password in its URL) is
// named as changed and its value is in no line of the log.
func TestReloadLogsWhatChanged(t *testing.T) {
	const oldPW, newPW = "old-redis-pw-4821", "new-redis-pw-9377"
	const newToken = "new-internal-token-5501234567"
	rs, err := testredis.Run(testredis.Options{Dir: t.TempDir(), Args: []string{"--user", "gw", "on", ">" + oldPW, "~*", "&*", "+@all"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rs.Close)
	var log testlog.Buffer
	b := newTestBackend(t)
	gw := startGateway(t, b, func(o *Options) {
		o.Config.Redis.URL = config.List{"redis://gw:" + oldPW + "@" + rs.Addr() + "/0"}
		o.Logger = slog.New(slog.NewJSONHandler(&log, nil))
	})
	s := *gw.cfg
	s.Version = "v2"
	s.Limits.Vendor.Reads = config.Limit{Rate: 50, Period: time.Minute}
	s.TrustedProxies = config.List{"10.0.0.0/8"}
	s.Redis.URL = config.List{"redis://gw:" + newPW + "@" + rs.Addr() + "/0"}
	s.InternalToken = newToken
	s.Proxy.Timeout = 3 * time.Second
	if err := gw.g.Reload(&s); err != nil {
		t.Fatal(err)
	}

	var line struct {
		Msg           string   `json:"msg"`
		Version       string   `json:"config_version"`
		Changed       []string `json:"changed"`
		RestartNeeded []string `json:"restart_needed"`
	}
	for _, l := range strings.Split(log.String(), "\n") {
		if strings.Contains(l, `"configuration reloaded"`) {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatal(err)
			}
		}
	}
	if line.Version != "v2" {
		t.Fatalf("no reload line of v2 in the log:\n%s", log.String())
	}
	wantChanged := []string{"limits.vendor.reads: {kind: gcra, rate: 5, period: 1m0s, burst: 5} -> {kind: gcra, rate: 50, period: 1m0s, burst: 50}", "trusted_proxies: [] -> [10.0.0.0/8]"}
	wantRestart := []string{"internal_token: changed (secret)", "proxy.timeout: 2s -> 3s", "redis.url: changed (secret)"}
	if !reflect.DeepEqual(line.Changed, wantChanged) {
		t.Errorf("changed: %q\nwant     %q", line.Changed, wantChanged)
	}
	if !reflect.DeepEqual(line.RestartNeeded, wantRestart) {
		t.Errorf("restart_needed: %q\nwant            %q", line.RestartNeeded, wantRestart)
	}
	for _, secret := range []string{oldPW, newPW, testToken, newToken} {
		if strings.Contains(log.String(), secret) {
			t.Errorf("the log holds a secret (%.6s...)", secret)
		}
	}

	// A reload of the same settings changes nothing, and says so.
	log2 := len(log.String())
	s3 := s
	s3.Version = "v3"
	if err := gw.g.Reload(&s3); err != nil {
		t.Fatal(err)
	}
	if got := log.String()[log2:]; !strings.Contains(got, `"changed":[],"restart_needed":[]`) {
		t.Errorf("a reload of the same settings logged %s", got)
	}
}
