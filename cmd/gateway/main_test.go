package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"vendorgate/config"
	"vendorgate/gateway"
	"vendorgate/shared/testbuild"
)

// bin is the gateway binary built for these tests.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gateway-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "gateway")
	if err := testbuild.Build(".", dir, testbuild.Flags(), "."); err != nil {
		fmt.Fprintf(os.Stderr, "build: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

const (
	testInternalToken = "check-test-internal-token-0123456789"
	testSigning       = "check-test-key-signing-secret-0123456789abcdef"
)

// testEnv is what the environment file gives a gateway: its secrets.
func testEnv() map[string]string {
	return map[string]string{"GATEWAY_INTERNAL_TOKEN": testInternalToken, "GATEWAY_KEY_SIGNING_SECRETS": testSigning}
}

// base is a file the gateway starts with, on loopback ports of its own
// choice: each refused configuration below is it and one mistake.
const base = "listen: 127.0.0.1:0\nadmin_listen: 127.0.0.1:0\nbackend_url: http://127.0.0.1:9\n"

// policies are n policy rows of class reports, each its own name.
func policies(n int) string {
	var b strings.Builder
	b.WriteString("limits:\n  policies:\n")
	for i := range n {
		fmt.Fprintf(&b, "    - {name: p%d, scope: vendor, class: reports, rate: 5, period: 1m}\n", i)
	}
	return b.String()
}

// twinned are n policy rows of class reports, each with a shadow twin: a
// report download is subject to the reads row and 2n limits of these.
func twinned(n int) string {
	var b strings.Builder
	b.WriteString("limits:\n  policies:\n")
	for i := range n {
		fmt.Fprintf(&b, "    - {name: t%d, scope: vendor, class: reports, rate: 5, period: 1m, shadow_twin: {rate: 9, period: 1m}}\n", i)
	}
	return b.String()
}

// refused are configurations the gateway refuses: each one that a test
// of the gateway or of the configuration refuses, and the ones `-check`
// once passed while a start refused them (a class no route counts, a
// table past its capacity, a route past its checks).
var refused = []struct {
	name, yaml string
	env        map[string]string
	want       string // in the refusal
}{
	{"a class no route counts", policies(0) + "    - {name: downloads, scope: vendor, class: report, rate: 5, period: 1m}\n", nil,
		`class "report", which no route counts (the classes routes count: orders, reads, reports)`},
	{"a misspelt class", policies(0) + "    - {name: typo, scope: vendor, class: raeds, rate: 2, period: 1m}\n", nil, `class "raeds"`},
	{"20 policies", policies(16), nil, "limits: 20 policies, at most 16"},
	{"17 policies", policies(13), nil, "limits: 17 policies, at most 16"},
	{"a route past its checks", twinned(8), nil, "is subject to more than 16 limits"},
	{"an unknown kind", policies(0) + "    - {name: d, scope: vendor, class: reports, kind: leaky, rate: 5, period: 1m}\n", nil, `.kind: "leaky" must be gcra`},
	{"a concurrency policy with a period", policies(0) + "    - {name: d, scope: vendor, class: reports, kind: concurrency, rate: 4, period: 1m}\n", nil, "kind concurrency has no period"},
	{"a concurrency policy with a burst", policies(0) + "    - {name: d, scope: vendor, class: reports, kind: concurrency, rate: 4, burst: 8}\n", nil, "kind concurrency has no burst"},
	{"a concurrency policy with a twin", policies(0) + "    - {name: d, scope: vendor, class: reports, kind: concurrency, rate: 4, shadow_twin: {rate: 2}}\n", nil, "no shadow flag or shadow twin"},
	{"a concurrency policy without a cap", policies(0) + "    - {name: d, scope: vendor, class: reports, kind: concurrency}\n", nil, "limits.policies[0].rate must be positive"},
	{"a concurrency override without a cap", policies(0) + "    - {name: d, scope: vendor, class: reports, kind: concurrency, rate: 4, overrides: {v1: {rate: 0}}}\n", nil, "overrides.v1.rate must be positive"},
	{"a concurrency policy of a class no route counts", policies(0) + "    - {name: d, scope: vendor, class: report, kind: concurrency, rate: 4}\n", nil, `class "report", which no route counts`},
	{"a slot refresh past half the slot TTL", "redis:\n  slot_ttl: 10s\n  slot_refresh: 6s\n", nil, "redis.slot_refresh"},
	{"a negative rate", "limits:\n  vendor:\n    reads: {rate: -1, period: 1m}\n", nil, "limits.vendor.reads"},
	{"a cost above the burst", policies(0) + "    - {name: downloads, scope: vendor, class: reports, rate: 30, burst: 4, period: 1m, cost: 5}\n", nil,
		"limits.policies[0].cost (5) is above the burst of limits.policies[0] (4)"},
	{"a cost above an override's burst", policies(0) + "    - {name: downloads, scope: vendor, class: reports, rate: 30, period: 1m, cost: 5, overrides: {v1: {rate: 2, period: 1m}}}\n", nil,
		"above the burst of limits.policies[0].overrides.v1 (2)"},
	{"a cost on a quota", policies(0) + "    - {name: q, scope: vendor, class: orders, kind: quota, rate: 1000, window: day, cost: 5}\n", nil,
		"limits.policies[0]: cost and refund_failures are for kind gcra (a quota counts requests)"},
	{"a refund on a concurrency cap", policies(0) + "    - {name: c, scope: vendor, class: reports, kind: concurrency, rate: 4, refund_failures: true}\n", nil,
		"limits.policies[0]: cost and refund_failures are for kind gcra (a concurrency counts requests)"},
	{"a cost on the reads row", "limits:\n  vendor:\n    reads: {rate: 120, period: 1m, cost: 2}\n", nil, `unknown key "cost"`},
	{"a policy without a class", policies(0) + "    - {name: nameless, scope: vendor, rate: 5, period: 1m}\n", nil, ".class: name the routes it counts"},
	{"a quota without its window", policies(0) + "    - {name: q, scope: vendor, class: orders, kind: quota, rate: 1000}\n", nil, "a quota needs window (day or month, in UTC) or days"},
	{"a quota with a period", policies(0) + "    - {name: q, scope: vendor, class: orders, kind: quota, rate: 1000, period: 24h}\n", nil, "limits.policies[0].period: a quota counts per calendar window"},
	{"a quota of a week", policies(0) + "    - {name: q, scope: vendor, class: orders, kind: quota, rate: 1000, window: week}\n", nil, "limits.policies[0].window: \"week\" must be day or month"},
	{"a quota with window and days", policies(0) + "    - {name: q, scope: vendor, class: orders, kind: quota, rate: 1000, window: day, days: 7}\n", nil, "set window or days, not both"},
	{"a quota of 400 days", policies(0) + "    - {name: q, scope: vendor, class: orders, kind: quota, rate: 1000, days: 400}\n", nil, "limits.policies[0].days: 400 must be 1-366"},
	{"a quota with a burst", policies(0) + "    - {name: q, scope: vendor, class: orders, kind: quota, rate: 1000, window: day, burst: 10}\n", nil, "limits.policies[0].burst: a quota has no burst"},
	{"a quota with a shadow twin", policies(0) + "    - {name: q, scope: vendor, class: orders, kind: quota, rate: 1000, window: day, shadow_twin: {rate: 5, period: 1m}}\n", nil, "a quota has no shadow twin"},
	{"a kind misspelt", policies(0) + "    - {name: q, scope: vendor, class: orders, kind: leaky, rate: 5, period: 1m}\n", nil, "limits.policies[0].kind: \"leaky\" must be gcra, quota, window or concurrency"},
	{"a sliding window without a period", policies(0) + "    - {name: q, scope: vendor, class: orders, kind: window, rate: 5}\n", nil, "limits.policies[0].period must be at least 1s"},
	{"a sliding window too large", policies(0) + "    - {name: q, scope: vendor, class: orders, kind: window, rate: 200000, period: 1h}\n", nil, "a sliding window admits at most 100000"},
	{"a token bucket with a calendar window", policies(0) + "    - {name: q, scope: vendor, class: orders, rate: 5, period: 1m, window: day}\n", nil, "window and days are for kind quota"},
	{"the reads row as a quota", "limits:\n  vendor:\n    reads: {kind: quota, rate: 1000, window: day}\n", nil, "limits.vendor.reads.kind: the built-in rows are gcra or window"},
	{"an override of another kind", policies(0) + "    - {name: q, scope: vendor, class: orders, kind: quota, rate: 1000, window: day, overrides: {v1: {rate: 5, period: 1m, kind: gcra}}}\n", nil, "limits.policies[0].overrides.v1: an override keeps the row's kind"},
	{"an override of a quota with a period", policies(0) + "    - {name: q, scope: vendor, class: orders, kind: quota, rate: 1000, window: day, overrides: {v1: {rate: 5, period: 1m}}}\n", nil, "limits.policies[0].overrides.v1.period: a quota counts per calendar window"},
	{"a trusted proxy that is no address", "trusted_proxies: [10.0.0.0/33]\n", nil, "trusted_proxies"},
	{"a short key-signing secret", "", map[string]string{"GATEWAY_KEY_SIGNING_SECRETS": "short"}, "key_signing_secrets"},
	{"no backend", "backend_url: []\n", nil, "backend_url"},
	{"a Redis URL that does not parse", "redis:\n  url: [\"redis://127.0.0.1:notaport\"]\n", nil, "redis"},
}

// runGateway runs the binary with args and the file, and returns its exit code
// and what it wrote to stderr. A start that was not refused would serve
// until stopped: the context ends it, and the test says so.
func runGateway(t *testing.T, file string, env map[string]string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append(args, "-config", file)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("gateway %v ran until stopped: not refused\n%s", args, stderr.String())
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), strings.TrimSpace(stderr.String())
}

// TestCheckAgreesWithStart: every configuration the gateway refuses is
// refused by `gateway -check` and by a start alike, exit 2 with the same
// line naming the mistake; gateway.New refuses it too (a start that got
// past the binary's check). The base file itself passes -check.
func TestCheckAgreesWithStart(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte(base), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, stderr := runGateway(t, good, testEnv(), "-check"); code != 0 {
		t.Fatalf("the base file: -check exit %d: %s", code, stderr)
	}
	for i, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(dir, fmt.Sprintf("bad%d.yaml", i))
			if err := os.WriteFile(file, []byte(base+tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			env := testEnv()
			for k, v := range tc.env {
				env[k] = v
			}
			checkCode, checkSays := runGateway(t, file, env, "-check")
			startCode, startSays := runGateway(t, file, env)
			if checkCode != 2 || !strings.HasPrefix(checkSays, "gateway: configuration: ") || !strings.Contains(checkSays, tc.want) {
				t.Errorf("-check: exit %d, %q; want exit 2 and a line naming %q", checkCode, checkSays, tc.want)
			}
			if startCode != checkCode || startSays != checkSays {
				t.Errorf("start: exit %d, %q\n-check: exit %d, %q", startCode, startSays, checkCode, checkSays)
			}

			// The same file through the functions main calls: refused by
			// the loader or by the gateway's own check, and by New.
			cfg, err := config.LoadGateway(file, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
			if err != nil {
				if !strings.Contains(err.Error(), tc.want) {
					t.Errorf("LoadGateway: %v, want %q", err, tc.want)
				}
				return
			}
			if err := gateway.Check(cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Check: %v, want %q", err, tc.want)
			}
			if g, err := gateway.New(gateway.Options{Config: cfg}); err == nil || !strings.Contains(err.Error(), tc.want) {
				if g != nil {
					g.Close()
				}
				t.Errorf("New: %v, want %q", err, tc.want)
			}
		})
	}
}

// TestCheckPassesQuotasAndWindows: rows of every kind, the reads row a
// sliding window, pass `gateway -check`.
func TestCheckPassesQuotasAndWindows(t *testing.T) {
	file := filepath.Join(t.TempDir(), "kinds.yaml")
	kinds := "limits:\n  vendor:\n    reads: {kind: window, rate: 120, period: 1m}\n    orders: {rate: 10, period: 1m}\n  policies:\n" +
		"    - {name: orders-day, scope: vendor, class: orders, kind: quota, rate: 1000, window: day}\n" +
		"    - {name: orders-month, scope: vendor, class: orders, kind: quota, rate: 20000, window: month, overrides: {v1: {rate: 40000}}}\n" +
		"    - {name: reports-week, scope: key, class: reports, kind: quota, rate: 500, days: 7, shadow: true}\n"
	if err := os.WriteFile(file, []byte(base+kinds), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, stderr := runGateway(t, file, testEnv(), "-check"); code != 0 {
		t.Fatalf("-check exit %d: %s", code, stderr)
	}
}
