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
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build: %v\n%s", err, out)
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
	{"16 policies", policies(12), nil, "limits: 16 policies, at most 8"},
	{"9 policies", policies(5), nil, "limits: 9 policies, at most 8"},
	{"a route past its checks", "limits:\n  per_key:\n    reads: {rate: 5, period: 1m, shadow_twin: {rate: 9, period: 1m}}\n  vendor:\n    reads: {rate: 5, period: 1m, shadow_twin: {rate: 9, period: 1m}}\n" +
		"  policies:\n    - {name: r1, scope: vendor, class: reads, rate: 5, period: 1m, shadow_twin: {rate: 9, period: 1m}}\n" +
		"    - {name: r2, scope: key, class: reads, rate: 5, period: 1m, shadow_twin: {rate: 9, period: 1m}}\n" +
		"    - {name: d1, scope: vendor, class: reports, rate: 5, period: 1m}\n", nil, "is subject to more than 8 limits"},
	{"a negative rate", "limits:\n  vendor:\n    reads: {rate: -1, period: 1m}\n", nil, "limits.vendor.reads"},
	{"a cost above the burst", policies(0) + "    - {name: downloads, scope: vendor, class: reports, rate: 30, burst: 4, period: 1m, cost: 5}\n", nil,
		"limits.policies[0].cost (5) is above the burst of limits.policies[0] (4)"},
	{"a cost above an override's burst", policies(0) + "    - {name: downloads, scope: vendor, class: reports, rate: 30, period: 1m, cost: 5, overrides: {v1: {rate: 2, period: 1m}}}\n", nil,
		"above the burst of limits.policies[0].overrides.v1 (2)"},
	{"a cost on the reads row", "limits:\n  vendor:\n    reads: {rate: 120, period: 1m, cost: 2}\n", nil, `unknown key "cost"`},
	{"a policy without a class", policies(0) + "    - {name: nameless, scope: vendor, rate: 5, period: 1m}\n", nil, ".class: name the routes it counts"},
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
