package config

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const testSigning = "test-key-signing-secret-0123456789abcdef"

func envMap(m map[string]string) Env {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExamplesLoad(t *testing.T) {
	g, err := LoadGateway("examples/gateway.yaml", envMap(nil))
	if err != nil {
		t.Fatalf("gateway example: %v", err)
	}
	if g.Limits.Vendor.Reads.Rate != 120 || g.Limits.Vendor.Orders.Rate != 10 || len(g.Redis.URL) != 0 {
		t.Fatalf("gateway example limits: %+v", g.Limits)
	}
	b, err := LoadBackend("examples/backend.yaml", envMap(nil))
	if err != nil {
		t.Fatalf("backend example: %v", err)
	}
	if !b.SeedSandboxVendor || b.OrderDeadline != 48*time.Hour {
		t.Fatalf("backend example: %+v", b)
	}
}

func TestUnknownKeyNamesKeyAndFile(t *testing.T) {
	p := writeFile(t, "listen: \":1\"\nredis:\n  timeuot: 5ms\n")
	_, err := LoadGateway(p, envMap(map[string]string{"GATEWAY_INTERNAL_TOKEN": strings.Repeat("t", 16), "GATEWAY_KEY_SIGNING_SECRETS": testSigning}))
	if err == nil || !strings.Contains(err.Error(), `unknown key "timeuot"`) || !strings.Contains(err.Error(), p) ||
		!strings.Contains(err.Error(), "line 3") {
		t.Fatalf("err = %v", err)
	}
}

func TestEnvironmentOverrides(t *testing.T) {
	env := envMap(map[string]string{
		"GATEWAY_LISTEN":                    "127.0.0.1:1234",
		"GATEWAY_ADMIN_LISTEN":              "127.0.0.1:1235",
		"GATEWAY_BACKEND_URL":               "http://127.0.0.1:1,http://127.0.0.1:2",
		"GATEWAY_REDIS_URL":                 "redis://127.0.0.1:7000/0",
		"GATEWAY_INTERNAL_TOKEN":            "0123456789abcdef",
		"GATEWAY_REDIS_TIMEOUT":             "20ms",
		"GATEWAY_KEY_PREFIX_SANDBOX":        "acmesbx1",
		"GATEWAY_PUBLIC_BASE_URL":           "https://api.example.com",
		"GATEWAY_DOCS_RATE":                 "7",
		"GATEWAY_DOCS_WINDOW":               "30s",
		"GATEWAY_PROXY_STREAM_IDLE_TIMEOUT": "45s",
		"GATEWAY_IN_FLIGHT_REQUESTS":        "32",
		"GATEWAY_IN_FLIGHT_DOWNLOADS":       "4",
		"GATEWAY_PROXY_STREAM_MAX_CONNS":    "16",
		"GATEWAY_PROXY_STREAM_MIN_RATE":     "1024",
	})
	g, err := LoadGateway("examples/gateway.yaml", env)
	if err != nil {
		t.Fatal(err)
	}
	if g.Listen != "127.0.0.1:1234" || g.AdminListen != "127.0.0.1:1235" || len(g.BackendURL) != 2 ||
		g.Redis.URL[0] != "redis://127.0.0.1:7000/0" || g.InternalToken != "0123456789abcdef" ||
		g.Redis.Timeout != 20*time.Millisecond || g.KeyPrefixes.Sandbox != "acmesbx1" ||
		g.PublicBaseURL != "https://api.example.com" || g.Docs.Rate != 7 || g.Docs.Window != 30*time.Second ||
		g.Proxy.StreamIdleTimeout != 45*time.Second || g.InFlight.Requests != 32 || g.InFlight.Downloads != 4 ||
		g.Proxy.StreamMaxConns != 16 || g.Proxy.StreamMinRate != 1024 {
		t.Fatalf("env not applied: %+v", g)
	}

	b, err := LoadBackend("", envMap(map[string]string{
		"BACKEND_INTERNAL_TOKEN": "0123456789abcdef", "BACKEND_ADMIN_TOKEN": "fedcba9876543210",
		"BACKEND_ORDER_DEADLINE": "2s", "BACKEND_SANDBOX_DELAY": "100ms", "BACKEND_DATABASE": "postgres://u:secretpw@h/db",
		"BACKEND_LISTEN": "127.0.0.1:1", "BACKEND_ADMIN_LISTEN": "127.0.0.1:2", "BACKEND_PUBLIC_BASE_URL": "http://gw:8080",
		"BACKEND_REDIS_URL": "redis://127.0.0.1:1", "BACKEND_KEY_LIFETIME": "90d",
		"BACKEND_KEY_SIGNING_SECRETS": "new-" + testSigning + ", " + testSigning,
		"BACKEND_STREAM_IDLE_TIMEOUT": "2m",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if b.OrderDeadline != 2*time.Second || b.SandboxDelay != 100*time.Millisecond || !b.IsPostgres() ||
		b.KeyLifetime != 90*24*time.Hour || b.PublicBaseURL != "http://gw:8080" || len(b.RedisURL) != 1 ||
		len(b.KeySigningSecrets) != 2 || b.KeySigningSecrets[0] != "new-"+testSigning || b.KeySigningSecrets[1] != testSigning ||
		b.StreamIdleTimeout != 2*time.Minute {
		t.Fatalf("env not applied: %+v", b)
	}
}

func TestDefaults(t *testing.T) {
	g, err := LoadGateway("", envMap(map[string]string{"GATEWAY_INTERNAL_TOKEN": "0123456789abcdef", "GATEWAY_KEY_SIGNING_SECRETS": testSigning}))
	if err != nil {
		t.Fatal(err)
	}
	if g.Listen != ":8080" || g.AdminListen != "127.0.0.1:9090" || g.BackendURL[0] != "http://127.0.0.1:8081" ||
		len(g.Redis.URL) != 0 || g.FailedKeys.PerAddress != 100 || g.FailedKeys.PerKey != 10 || g.FailedKeys.Window != 10*time.Minute ||
		g.PublicBaseURL != "http://localhost:8080" || g.Docs.Rate != 60 || g.Docs.Window != time.Minute ||
		g.Proxy.StreamIdleTimeout != 30*time.Second || g.InFlight.Requests != 64 || g.InFlight.Downloads != 8 ||
		g.Proxy.StreamMaxConns != 128 || g.Proxy.StreamMinRate != 4096 || g.Proxy.StreamMinRateWindow != 30*time.Second ||
		g.Proxy.StreamMinRateGrace != 10*time.Second || g.FailedKeys.RedisPoolSize != 8 {
		t.Fatalf("defaults: %+v", g)
	}
}

func TestValidationMessages(t *testing.T) {
	cases := []struct {
		name, yaml, want string
		env              map[string]string
	}{
		{"no token", "", "GATEWAY_INTERNAL_TOKEN", nil},
		{"bad timeout", "redis: {timeout: 10s}", "redis.timeout", nil},
		{"bad cidr", "trusted_proxies: [10.0.0.0/99]", "trusted_proxies", nil},
		{"zero period", "limits: {vendor: {reads: {rate: 5, period: 0s}}}", "limits.vendor.reads.period", nil},
		{"policy row without scope", "limits: {policies: [{name: report-downloads, class: reports, rate: 2, period: 1m}]}", "limits.policies[0].scope", nil},
		{"policy row taking a built-in name", "limits: {policies: [{name: reads, scope: key, class: reads, rate: 2, period: 1m}]}", `limits.policies[0].name: "reads" is taken`, nil},
		{"policy row override", "limits: {policies: [{name: rd, scope: vendor, class: reports, rate: 2, period: 1m, overrides: {v1: {rate: 1}}}]}", "limits.policies[0].overrides.v1.period", nil},
		{"cost above the burst", "limits: {policies: [{name: rd, scope: vendor, class: reports, rate: 30, burst: 4, period: 1m, cost: 5}]}", "limits.policies[0].cost (5) is above the burst of limits.policies[0] (4)", nil},
		{"cost above an override's burst", "limits: {policies: [{name: rd, scope: vendor, class: reports, rate: 30, period: 1m, cost: 5, overrides: {v1: {rate: 3, period: 1m}}}]}", "above the burst of limits.policies[0].overrides.v1 (3)", nil},
		{"cost above the twin's burst", "limits: {policies: [{name: rd, scope: vendor, class: reports, rate: 30, period: 1m, cost: 5, shadow_twin: {rate: 2, period: 1m}}]}", "above the burst of limits.policies[0].shadow_twin (2)", nil},
		{"negative cost", "limits: {policies: [{name: rd, scope: vendor, class: reports, rate: 30, period: 1m, cost: -1}]}", "limits.policies[0].cost must not be negative", nil},
		{"cost on the reads row", "limits: {vendor: {reads: {rate: 120, period: 1m, cost: 2}}}", `unknown key "cost"`, nil},
		{"bad prefix", "key_prefixes: {sandbox: ab, live: vglive01}", "key_prefixes", nil},
		{"no in-flight cap", "in_flight: {requests: 0}", "in_flight.requests and in_flight.downloads must be positive", nil},
		{"downloads past requests", "in_flight: {requests: 4, downloads: 8}", "in_flight.downloads (8) must not exceed in_flight.requests (4)", nil},
		{"override downloads past requests", "in_flight: {overrides: {v1: {requests: 2}}}", "in_flight.overrides.v1: downloads (8) must not exceed requests (2)", nil},
		{"negative override", "in_flight: {overrides: {v1: {downloads: -1}}}", "in_flight.overrides.v1: caps must not be negative", nil},
		{"no stream pool", "proxy: {stream_max_conns: 0}", "proxy.stream_max_conns must be positive", nil},
		{"negative min rate", "proxy: {stream_min_rate: -1}", "proxy.stream_min_rate", nil},
		{"min rate window", "proxy: {stream_min_rate_window: 10ms}", "proxy.stream_min_rate_window must be at least 100ms", nil},
		{"zero throttle pool", "failed_keys: {redis_pool_size: 0}", "failed_keys.redis_pool_size: 0 must be between 1 and 1024", nil},
		{"bad env throttle pool", "", "failed_keys.redis_pool_size: 5000", map[string]string{"GATEWAY_FAILED_KEYS_REDIS_POOL_SIZE": "5000"}},
		{"bad env duration", "", "GATEWAY_REDIS_TIMEOUT", map[string]string{"GATEWAY_REDIS_TIMEOUT": "soon"}},
		{"bad backend url", "backend_url: ftp://x", "backend_url", nil},
		{"no signing secret", "", "GATEWAY_KEY_SIGNING_SECRETS", map[string]string{"GATEWAY_KEY_SIGNING_SECRETS": ""}},
		{"short signing secret", "", "shorter than 32 characters (GATEWAY_KEY_SIGNING_SECRETS)",
			map[string]string{"GATEWAY_KEY_SIGNING_SECRETS": testSigning + ",short"}},
		{"signing secret is the internal token", "internal_token: " + testSigning, "secret 1 of 1 is the internal token", nil},
		{"repeated signing secret", "", "secret 2 of 2 repeats", map[string]string{"GATEWAY_KEY_SIGNING_SECRETS": testSigning + "," + testSigning}},
		{"negative negative cache", "key_cache: {negative_size: -1}", "key_cache.negative_size", nil},
		{"bad public base url", "", "GATEWAY_PUBLIC_BASE_URL", map[string]string{"GATEWAY_PUBLIC_BASE_URL": "api.example.com"}},
		{"public base url with a path", "public_base_url: https://api.example.com/v1", "must not have a path", nil},
		{"zero docs rate", "docs: {rate: 0}", "docs.rate", nil},
		{"stream idle too short", "proxy: {stream_idle_timeout: 100ms}", "proxy.stream_idle_timeout", nil},
		{"no shutdown grace", "shutdown_grace: 0s", "shutdown_grace: 0s must be positive", nil},
		{"shutdown delay too long", "shutdown_delay: 2m", "shutdown_delay: 2m0s must be between 0 and 1m", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"GATEWAY_INTERNAL_TOKEN": "0123456789abcdef", "GATEWAY_KEY_SIGNING_SECRETS": testSigning}
			if tc.name == "no token" {
				env = map[string]string{"GATEWAY_KEY_SIGNING_SECRETS": testSigning}
			}
			if strings.HasPrefix(tc.yaml, "internal_token") {
				delete(env, "GATEWAY_INTERNAL_TOKEN")
			}
			for k, v := range tc.env {
				env[k] = v
			}
			_, err := LoadGateway(writeFile(t, tc.yaml), envMap(env))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want mention of %q", err, tc.want)
			}
		})
	}
}

// A built-in row given kind concurrency is told once, and plainly, what
// the built-in rows may be: not that "concurrency" must be one of a list
// that names concurrency.
func TestBuiltInRowOfKindConcurrency(t *testing.T) {
	env := envMap(map[string]string{"GATEWAY_INTERNAL_TOKEN": "0123456789abcdef", "GATEWAY_KEY_SIGNING_SECRETS": testSigning})
	_, err := LoadGateway(writeFile(t, "limits: {vendor: {reads: {kind: concurrency, rate: 4}}}"), env)
	const want = "limits.vendor.reads.kind: the built-in rows are gcra or window; add a quota or a concurrency cap as a row of limits.policies"
	if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "must be gcra") {
		t.Fatalf("err = %v; want only %q", err, want)
	}
}

func TestPrintMasksSecrets(t *testing.T) {
	b, err := LoadBackend("examples/backend.yaml", envMap(map[string]string{
		"BACKEND_DATABASE": "postgres://app:hunter2pass@db/vg", "BACKEND_REDIS_URL": "redis://:redispw99@r:6379/0"}))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := Print(&buf, b); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, secret := range []string{"dev-internal-token-change-me", "dev-admin-token-change-me", "dev-key-signing-secret", "hunter2pass", "redispw99"} {
		if strings.Contains(out, secret) {
			t.Errorf("-check output shows secret %q:\n%s", secret, out)
		}
	}
	if !strings.Contains(out, "order_deadline: 48h0m0s") || !strings.Contains(out, "internal_token: '********'") ||
		!strings.Contains(out, "key_signing_secrets:\n    - '********'") {
		t.Errorf("effective config not printed as expected:\n%s", out)
	}
	if b.InternalToken != "dev-internal-token-change-me" {
		t.Error("Print changed the config it printed")
	}
}

// Today's limits are read into the policy table's first rows, overrides
// included; a row of limits.policies follows them.
func TestLimitRows(t *testing.T) {
	g, err := LoadGateway(writeFile(t, `limits:
  vendor: {reads: {rate: 100, period: 1m}, orders: {rate: 5, period: 1m}}
  per_key: {reads: {rate: 7, period: 1m}}
  overrides: {v1: {orders: {rate: 50, period: 1m}}}
  policies:
    - {name: report-downloads, scope: vendor, class: reports, rate: 30, period: 1m, overrides: {v2: {rate: 60, period: 1m}}}
`), envMap(map[string]string{"GATEWAY_INTERNAL_TOKEN": "0123456789abcdef", "GATEWAY_KEY_SIGNING_SECRETS": testSigning}))
	if err != nil {
		t.Fatal(err)
	}
	rows := g.Limits.Rows()
	var got []string
	for _, r := range rows {
		got = append(got, fmt.Sprintf("%s/%s/%s/%d", r.Name, r.Scope, r.Class, r.Rate))
	}
	if want := "reads/vendor/reads/100 orders/vendor/orders/5 key-reads/key/reads/7 key-orders/key/orders/0 report-downloads/vendor/reports/30"; strings.Join(got, " ") != want {
		t.Fatalf("rows %q, want %q", strings.Join(got, " "), want)
	}
	if rows[1].For("v1").Rate != 50 || rows[1].For("v2").Rate != 5 || rows[0].For("v1").Rate != 100 || rows[4].For("v2").Rate != 60 {
		t.Fatalf("overrides: %+v %+v", rows[1].Overrides, rows[4].Overrides)
	}
}

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{"90d": 2160 * time.Hour, "36h": 36 * time.Hour, "2s": 2 * time.Second} {
		if got, err := ParseDuration(in); err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "xd", "-1d", "soon"} {
		if _, err := ParseDuration(bad); err == nil {
			t.Errorf("ParseDuration(%q) accepted", bad)
		}
	}
}

func TestVendorctl(t *testing.T) {
	if _, err := LoadVendorctl(envMap(nil)); err == nil || !strings.Contains(err.Error(), "VENDORCTL_ADMIN_TOKEN") {
		t.Fatalf("missing token: %v", err)
	}
	c, err := LoadVendorctl(envMap(map[string]string{"VENDORCTL_ADMIN_TOKEN": "x", "VENDORCTL_ADMIN_URL": "http://127.0.0.1:9"}))
	if err != nil || c.AdminURL != "http://127.0.0.1:9" {
		t.Fatalf("%+v %v", c, err)
	}
}

// The tls section and http_listen: read from the file and the environment,
// off by default, and refused with a message naming the setting when half
// set.
func TestTLSSettings(t *testing.T) {
	base := map[string]string{"GATEWAY_INTERNAL_TOKEN": "0123456789abcdef", "GATEWAY_KEY_SIGNING_SECRETS": testSigning}
	with := func(kv ...string) Env {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return envMap(m)
	}
	g, err := LoadGateway("", with())
	if err != nil {
		t.Fatal(err)
	}
	if g.TLS.Enabled() || g.HTTPListen != "" || g.TLS.WatchInterval != 30*time.Second {
		t.Fatalf("defaults: tls %+v, http_listen %q; want off, watch 30s", g.TLS, g.HTTPListen)
	}
	g, err = LoadGateway("", with("GATEWAY_TLS_CERT_FILE", "/tls/a.pem", "GATEWAY_TLS_KEY_FILE", "/tls/a-key.pem",
		"GATEWAY_TLS_WATCH_INTERVAL", "5s", "GATEWAY_HTTP_LISTEN", ":80", "GATEWAY_PUBLIC_BASE_URL", "https://api.example.com"))
	if err != nil {
		t.Fatal(err)
	}
	if !g.TLS.Enabled() || len(g.TLS.Files()) != 1 || g.TLS.Files()[0].KeyFile != "/tls/a-key.pem" || g.TLS.WatchInterval != 5*time.Second || g.HTTPListen != ":80" {
		t.Fatalf("env not applied: %+v %q", g.TLS, g.HTTPListen)
	}
	dir := t.TempDir()
	path := dir + "/gw.yaml"
	if err := os.WriteFile(path, []byte("tls:\n  cert_file: /tls/a.pem\n  key_file: /tls/a-key.pem\n  certificates:\n    - {cert_file: /tls/b.pem, key_file: /tls/b-key.pem}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if g, err = LoadGateway(path, with()); err != nil || len(g.TLS.Files()) != 2 || g.TLS.Files()[1].CertFile != "/tls/b.pem" {
		t.Fatalf("file: %v %+v", err, g)
	}
	for _, c := range []struct {
		env  []string
		want string
	}{
		{[]string{"GATEWAY_TLS_KEY_FILE", "/tls/a-key.pem"}, "key_file /tls/a-key.pem has no certificate"},
		{[]string{"GATEWAY_TLS_CERT_FILE", "/tls/a.pem"}, "cert_file /tls/a.pem has no key"},
		{[]string{"GATEWAY_TLS_CERT_FILE", "/a", "GATEWAY_TLS_KEY_FILE", "/b", "GATEWAY_TLS_WATCH_INTERVAL", "10ms"}, "tls.watch_interval"},
		{[]string{"GATEWAY_HTTP_LISTEN", ":80"}, "set an https:// public_base_url"},
		{[]string{"GATEWAY_HTTP_LISTEN", "nope", "GATEWAY_PUBLIC_BASE_URL", "https://api.example.com"}, "http_listen: \"nope\" is not host:port"},
		{[]string{"GATEWAY_HTTP_LISTEN", ":8080", "GATEWAY_PUBLIC_BASE_URL", "https://api.example.com"}, "already listen"},
		{[]string{"GATEWAY_PROXY_PROTOCOL", "true"}, "proxy_protocol: list the load balancers"},
		{[]string{"GATEWAY_TLS_ACME_DOMAINS", "api.example.com"}, "tls.acme.storage"},
		{[]string{"GATEWAY_TLS_ACME_DOMAINS", "*.example.com", "GATEWAY_TLS_ACME_STORAGE", "/acme"}, "no wildcards"},
		{[]string{"GATEWAY_TLS_ACME_DOMAINS", "api.example.com", "GATEWAY_TLS_ACME_STORAGE", "/acme", "GATEWAY_TLS_ACME_CA", "http://ca/dir"}, "tls.acme.ca"},
	} {
		_, err := LoadGateway("", with(c.env...))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error saying %q", c.env, err, c.want)
		}
	}
}

// The internal hop's TLS: backend_tls on the gateway and tls on the backend,
// read from the environment and the file, off by default, and refused with
// a message naming the setting when half set or set for a plain backend.
func TestInternalHopTLSSettings(t *testing.T) {
	gw := func(kv ...string) Env {
		m := map[string]string{"GATEWAY_INTERNAL_TOKEN": "0123456789abcdef", "GATEWAY_KEY_SIGNING_SECRETS": testSigning}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return envMap(m)
	}
	be := func(kv ...string) Env {
		m := map[string]string{"BACKEND_INTERNAL_TOKEN": "0123456789abcdef", "BACKEND_KEY_SIGNING_SECRETS": testSigning,
			"BACKEND_ADMIN_TOKEN": "0123456789abcdef"}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return envMap(m)
	}
	g, err := LoadGateway("", gw())
	if err != nil || g.BackendTLS.Set() {
		t.Fatalf("defaults: %v, backend_tls %+v; want off", err, g.BackendTLS)
	}
	g, err = LoadGateway("", gw("GATEWAY_BACKEND_URL", "https://backend:8443", "GATEWAY_BACKEND_TLS_CA_FILE", "/tls/ca.pem",
		"GATEWAY_BACKEND_TLS_CERT_FILE", "/tls/gw.pem", "GATEWAY_BACKEND_TLS_KEY_FILE", "/tls/gw-key.pem"))
	if err != nil || g.BackendTLS != (BackendTLS{CAFile: "/tls/ca.pem", CertFile: "/tls/gw.pem", KeyFile: "/tls/gw-key.pem"}) {
		t.Fatalf("env: %v %+v", err, g)
	}
	path := writeFile(t, "backend_url: https://backend:8443\nbackend_tls:\n  ca_file: /tls/ca.pem\n")
	if g, err = LoadGateway(path, gw()); err != nil || g.BackendTLS.CAFile != "/tls/ca.pem" {
		t.Fatalf("file: %v %+v", err, g)
	}
	b, err := LoadBackend("", be())
	if err != nil || b.TLS.Enabled() {
		t.Fatalf("backend defaults: %v, tls %+v; want off", err, b.TLS)
	}
	b, err = LoadBackend(writeFile(t, "tls:\n  cert_file: /tls/b.pem\n  key_file: /tls/b-key.pem\n  client_ca_file: /tls/gw-ca.pem\n"), be())
	if err != nil || !b.TLS.Enabled() || b.TLS.ClientCAFile != "/tls/gw-ca.pem" {
		t.Fatalf("backend file: %v %+v", err, b)
	}
	for _, c := range []struct {
		env  []string
		want string
	}{
		{[]string{"GATEWAY_BACKEND_TLS_CA_FILE", "/tls/ca.pem"}, `backend_url "http://127.0.0.1:8081" is plain http`},
		{[]string{"GATEWAY_BACKEND_URL", "https://b:1", "GATEWAY_BACKEND_TLS_CERT_FILE", "/tls/gw.pem"}, "cert_file /tls/gw.pem has no key: set backend_tls.key_file"},
		{[]string{"GATEWAY_BACKEND_URL", "https://b:1", "GATEWAY_BACKEND_TLS_KEY_FILE", "/tls/gw-key.pem"}, "key_file /tls/gw-key.pem has no certificate: set backend_tls.cert_file"},
	} {
		if _, err := LoadGateway("", gw(c.env...)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error saying %q", c.env, err, c.want)
		}
	}
	for _, c := range []struct {
		env  []string
		want string
	}{
		{[]string{"BACKEND_TLS_CERT_FILE", "/tls/b.pem"}, "cert_file /tls/b.pem has no key: set tls.key_file"},
		{[]string{"BACKEND_TLS_KEY_FILE", "/tls/b-key.pem"}, "key_file /tls/b-key.pem has no certificate: set tls.cert_file"},
		{[]string{"BACKEND_TLS_CLIENT_CA_FILE", "/tls/gw-ca.pem"}, "tls.client_ca_file: /tls/gw-ca.pem is set but tls.cert_file"},
	} {
		if _, err := LoadBackend("", be(c.env...)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error saying %q", c.env, err, c.want)
		}
	}
}

// TestExamplesBindLoopback: the example configs carry development
// secrets, so every listener they name binds the loopback address only.
func TestExamplesBindLoopback(t *testing.T) {
	g, err := LoadGateway("examples/gateway.yaml", envMap(nil))
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadBackend("examples/backend.yaml", envMap(nil))
	if err != nil {
		t.Fatal(err)
	}
	for name, addr := range map[string]string{"gateway listen": g.Listen, "gateway admin_listen": g.AdminListen,
		"backend listen": b.Listen, "backend admin_listen": b.AdminListen} {
		if host, _, err := net.SplitHostPort(addr); err != nil || net.ParseIP(host) == nil || !net.ParseIP(host).IsLoopback() {
			t.Errorf("the example's %s is %q: not a loopback address", name, addr)
		}
	}
}

// TestWarnsHTTPBaseURLUnderTLS: with TLS on, an http:// public_base_url
// would put a scheme the listener does not speak in every Location,
// poll.url and the OpenAPI servers entry: the configuration is accepted
// with a warning naming the setting; https:// or TLS off warns of nothing.
func TestWarnsHTTPBaseURLUnderTLS(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{"GATEWAY_TLS_CERT_FILE": dir + "/c.pem", "GATEWAY_TLS_KEY_FILE": dir + "/k.pem", "GATEWAY_PUBLIC_BASE_URL": "http://localhost:8080"}, true},
		{map[string]string{"GATEWAY_TLS_CERT_FILE": dir + "/c.pem", "GATEWAY_TLS_KEY_FILE": dir + "/k.pem", "GATEWAY_PUBLIC_BASE_URL": "https://localhost:8080"}, false},
		{map[string]string{"GATEWAY_PUBLIC_BASE_URL": "http://localhost:8080"}, false},
	} {
		g, err := LoadGateway("examples/gateway.yaml", envMap(tc.env))
		if err != nil {
			t.Fatal(err)
		}
		w := g.Warnings()
		got := len(w) == 1 && strings.HasPrefix(w[0], "public_base_url: ") && strings.Contains(w[0], "https://")
		if got != tc.want || (!tc.want && len(w) != 0) {
			t.Errorf("%v: warnings %q, want a public_base_url warning: %v", tc.env, w, tc.want)
		}
	}
}

// TestACMELocalhostSaysWhatWorks: tls.acme.domains refuses localhost (no
// CA can reach it) and says what works instead: a dotted name the CA
// resolves to this gateway, as Pebble's challtestsrv answers locally.
func TestACMELocalhostSaysWhatWorks(t *testing.T) {
	_, err := LoadGateway("examples/gateway.yaml", envMap(map[string]string{"GATEWAY_TLS_ACME_DOMAINS": "localhost",
		"GATEWAY_TLS_ACME_EMAIL": "ops@example.com", "GATEWAY_TLS_ACME_STORAGE": t.TempDir(), "GATEWAY_PUBLIC_BASE_URL": "https://localhost"}))
	if err == nil || !strings.Contains(err.Error(), `tls.acme.domains: "localhost"`) ||
		!strings.Contains(err.Error(), "a dotted name the CA resolves to this gateway") || !strings.Contains(err.Error(), "pebble-challtestsrv") {
		t.Fatalf("localhost as an ACME domain: %v", err)
	}
}

// TestDocsQuotaOverrideExample: docs/limits.md's per-vendor quota override
// loads as it is written, giving the vendor its own rate under the row's
// kind and window, and the first try it quotes is refused with the message
// it quotes.
func TestDocsQuotaOverrideExample(t *testing.T) {
	doc, err := os.ReadFile("../docs/limits.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "<!-- example: a per-vendor quota override -->")
	start, end := strings.Index(rest, "```yaml\n"), strings.Index(rest, "  ```\n")
	if !ok || start < 0 || end < start {
		t.Fatal("no per-vendor quota override example in docs/limits.md")
	}
	var lines []string
	for _, l := range strings.Split(rest[start+len("```yaml\n"):end], "\n") {
		lines = append(lines, strings.TrimPrefix(l, "  "))
	}
	example := strings.Join(lines, "\n")
	env := envMap(map[string]string{"GATEWAY_INTERNAL_TOKEN": strings.Repeat("t", 16), "GATEWAY_KEY_SIGNING_SECRETS": testSigning})
	g, err := LoadGateway(writeFile(t, example), env)
	if err != nil {
		t.Fatalf("the documented example is refused: %v\n%s", err, example)
	}
	row := g.Limits.Policies[0]
	if l := row.For("v-acme"); l.Rate != 5000 || l.KindOf() != KindQuota || l.Window != WindowDay || row.For("other").Rate != 1000 {
		t.Errorf("v-acme's limit %+v, another vendor's %+v", l, row.For("other"))
	}
	firstTry := strings.Replace(example, "{rate: 5000}", "{rate: 5000, window: day}", 1)
	_, err = LoadGateway(writeFile(t, firstTry), env)
	quoted := "limits.policies[0].overrides.v-acme: an override keeps the row's kind and window: set only rate, period, burst and shadow"
	if err == nil || !strings.Contains(err.Error(), quoted) || !strings.Contains(strings.Join(strings.Fields(string(doc)), " "), quoted) {
		t.Errorf("the first try: %v, want %q", err, quoted)
	}
}

// TestKeyCacheInForce: the key cache's zeros that mean something are
// resolved here, once (the cache itself refuses a zero): negative_size 0
// is a tenth of size, at least 64; pushed_ttl 0 the default, at least ttl;
// values set are kept.
func TestKeyCacheInForce(t *testing.T) {
	d := DefaultGateway().KeyCache
	for _, tc := range []struct {
		in, want KeyCache
	}{
		{KeyCache{Size: 100000, TTL: 30 * time.Second}, KeyCache{Size: 100000, TTL: 30 * time.Second, NegativeSize: 10000, PushedTTL: d.PushedTTL}},
		{KeyCache{Size: 100, TTL: time.Hour}, KeyCache{Size: 100, TTL: time.Hour, NegativeSize: 64, PushedTTL: time.Hour}},
		{KeyCache{Size: 100, TTL: time.Second, NegativeSize: 7, PushedTTL: time.Minute},
			KeyCache{Size: 100, TTL: time.Second, NegativeSize: 7, PushedTTL: time.Minute}},
	} {
		if got := tc.in.InForce(); got != tc.want {
			t.Errorf("%+v in force: %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

// A shutdown_grace of 0 would leave no drain at all: both binaries refuse
// it at load, rather than the backend waiting a second of its own and
// the gateway none.
func TestBackendShutdownGraceMustBePositive(t *testing.T) {
	b, err := LoadBackend("examples/backend.yaml", envMap(map[string]string{"BACKEND_SHUTDOWN_GRACE": "0s"}))
	if err == nil || !strings.Contains(err.Error(), "shutdown_grace: 0s must be positive") {
		t.Fatalf("err = %v (config %+v), want shutdown_grace refused", err, b)
	}
}
