package deploy

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"vendorgate/shared/testbuild"
)

// The configuration files under deploy/config hold no secrets and load
// through the config package (with the tokens from the environment).
func TestConfigFiles(t *testing.T) {
	for _, bin := range []string{"gateway", "backend"} {
		p := "config/" + bin + ".yaml"
		doc := yamlDoc(t, p)
		for _, k := range secretKeys {
			if _, ok := doc[k]; ok {
				t.Errorf("%s holds %s: tokens belong in the environment", p, k)
			}
		}
		eff := loadConfig(t, bin, readFile(t, p), map[string]string{
			"GATEWAY_INTERNAL_TOKEN": dummyToken, "BACKEND_INTERNAL_TOKEN": dummyToken, "BACKEND_ADMIN_TOKEN": dummyToken,
			"GATEWAY_KEY_SIGNING_SECRETS": dummySigning, "BACKEND_KEY_SIGNING_SECRETS": dummySigning})
		if eff.grace <= 0 {
			t.Errorf("%s: shutdown_grace %v", p, eff.grace)
		}
	}
}

// The systemd units run the binaries with their config and env files,
// restart on failure, stop with SIGTERM after the drain, and are hardened.
func TestSystemdUnits(t *testing.T) {
	for _, bin := range []string{"gateway", "backend"} {
		p := "systemd/vendorgate-" + bin + ".service"
		t.Run(bin, func(t *testing.T) {
			u := parseUnit(t, p)
			want := map[string]map[string]string{
				"Unit": {"After": "network-online.target", "Wants": "network-online.target"},
				"Service": {
					"ExecStart":       "/usr/local/bin/" + bin + " -config /etc/vendorgate/" + bin + ".yaml",
					"EnvironmentFile": "/etc/vendorgate/" + bin + ".env",
					"KillSignal":      "SIGTERM",
					"Restart":         "on-failure",
					"NoNewPrivileges": "yes",
					"ProtectSystem":   "strict",
					"PrivateTmp":      "yes",
				},
				"Install": {"WantedBy": "multi-user.target"},
			}
			if bin == "gateway" {
				reloadLines(t) // the file checked, then the signal
			} else {
				want["Service"]["StateDirectory"] = "vendorgate"
			}
			for section, kv := range want {
				for k, v := range kv {
					if got := u.get(section, k); !strings.Contains(" "+got+" ", " "+v+" ") {
						t.Errorf("[%s] %s=%q, want %q", section, k, got, v)
					}
				}
			}
			if bin == "backend" && u.get("Service", "ExecReload") != "" {
				t.Error("the backend has ExecReload, but it does not handle SIGHUP (which would stop it)")
			}
			if u.get("Service", "DynamicUser") != "yes" && u.get("Service", "User") == "" {
				t.Error("neither DynamicUser=yes nor a dedicated User=")
			}
			if _, err := readFileErr("systemd/" + bin + ".env.example"); err != nil {
				t.Errorf("no example for %s: %v", u.get("Service", "EnvironmentFile"), err)
			}

			// TimeoutStopSec above shutdown_grace of the config the unit runs
			// (deploy/config/<bin>.yaml is what the install notes copy).
			env := map[string]string{}
			for _, v := range u["Service"]["Environment"] {
				for _, kv := range strings.Fields(v) {
					k, val, _ := strings.Cut(strings.Trim(kv, `"`), "=")
					env[k] = val
				}
			}
			for k, v := range envFileNames(t, "systemd/"+bin+".env.example") {
				if v != "" {
					env[k] = v
				}
			}
			env["GATEWAY_INTERNAL_TOKEN"], env["BACKEND_INTERNAL_TOKEN"], env["BACKEND_ADMIN_TOKEN"] = dummyToken, dummyToken, dummyToken
			env["GATEWAY_KEY_SIGNING_SECRETS"], env["BACKEND_KEY_SIGNING_SECRETS"] = dummySigning, dummySigning
			eff := loadConfig(t, bin, readFile(t, "config/"+bin+".yaml"), env)
			stop, err := time.ParseDuration(u.get("Service", "TimeoutStopSec"))
			if err != nil || stop.Seconds() <= eff.grace {
				t.Errorf("TimeoutStopSec=%s must exceed shutdown_grace (%vs)", u.get("Service", "TimeoutStopSec"), eff.grace)
			}
			if bin == "backend" && !strings.HasPrefix(env["BACKEND_DATABASE"], "/var/lib/vendorgate/") {
				t.Errorf("BACKEND_DATABASE=%q is not in the StateDirectory /var/lib/vendorgate", env["BACKEND_DATABASE"])
			}

			// systemd's own check, with the binary (not installed here)
			// replaced by /bin/true.
			analyze, err := exec.LookPath("systemd-analyze")
			if err != nil {
				t.Log("systemd-analyze not on PATH: unit syntax not verified")
				return
			}
			text := strings.ReplaceAll(string(readFile(t, p)), "/usr/local/bin/"+bin, "/bin/true")
			tmp := filepath.Join(t.TempDir(), filepath.Base(p))
			if err := writeFile(tmp, text); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(analyze, "verify", tmp).CombinedOutput()
			if err != nil || strings.Contains(string(out), filepath.Base(p)+":") {
				t.Errorf("systemd-analyze verify: %v\n%s", err, out)
			}
		})
	}
}

// reloadLines are the gateway unit's ExecReload commands, in order: systemd
// runs them one after the other and the reload fails at the first that
// fails.
func reloadLines(t *testing.T) []string {
	t.Helper()
	lines := parseUnit(t, "systemd/vendorgate-gateway.service")["Service"]["ExecReload"]
	want := []string{"/usr/local/bin/gateway -check -config /etc/vendorgate/gateway.yaml", "/bin/kill -HUP $MAINPID"}
	if !slices.Equal(lines, want) {
		t.Fatalf("ExecReload=%q, want %q: the file checked before the signal", lines, want)
	}
	return lines
}

// TestGatewayReloadChecksFirst runs the unit's ExecReload lines as systemd
// does (one after the other, the first failure ends the reload), with the
// binary built here, a file of its own and a stand-in for the gateway's
// process: a file the gateway refuses makes the reload fail and no signal
// is sent; a good one sends the SIGHUP.
func TestGatewayReloadChecksFirst(t *testing.T) {
	if sighupIgnored(t) {
		// Inherited by the stand-in, which would sleep through the signal.
		t.Fatal("SIGHUP is ignored in this process (started under nohup?), and so in the gateway's stand-in: " +
			"run the tests where SIGHUP is not ignored")
	}
	lines := reloadLines(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "gateway")
	if err := testbuild.Build(".", dir, testbuild.Flags(), "../cmd/gateway"); err != nil {
		t.Fatalf("build: %v", err)
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "GATEWAY_INTERNAL_TOKEN=" + dummyToken, "GATEWAY_KEY_SIGNING_SECRETS=" + dummySigning}
	good := string(readFile(t, "config/gateway.yaml"))
	for _, tc := range []struct {
		name, yaml string
		ok         bool
		why        string // in the failed reload's output
	}{
		{"the shipped file", good, true, ""},
		{"a class no route counts", strings.Replace(good, "  per_key: {}\n", "  per_key: {}\n  policies:\n    - {name: downloads, scope: vendor, class: report, rate: 5, period: 1m}\n", 1), false,
			`counts class "report", which no route counts`},
		{"not YAML", "limits: [\n", false, "gateway: configuration:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "gateway.yaml")
			if err := writeFile(file, tc.yaml); err != nil {
				t.Fatal(err)
			}
			// The gateway's stand-in: a process that a SIGHUP ends.
			main := exec.Command("sleep", "60")
			if err := main.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- main.Wait() }()
			t.Cleanup(func() { _ = main.Process.Kill() })

			var failed error
			ran := 0
			for _, line := range lines {
				line = strings.ReplaceAll(line, "/usr/local/bin/gateway", bin)
				line = strings.ReplaceAll(line, "/etc/vendorgate/gateway.yaml", file)
				line = strings.ReplaceAll(line, "$MAINPID", strconv.Itoa(main.Process.Pid))
				args := strings.Fields(line)
				cmd := exec.Command(args[0], args[1:]...)
				cmd.Env = env
				ran++
				if out, err := cmd.CombinedOutput(); err != nil {
					failed = fmt.Errorf("%s: %v\n%s", line, err, out)
					break
				}
			}
			if tc.ok {
				if failed != nil {
					t.Fatalf("the reload failed: %v", failed)
				}
				err := <-exited // the SIGHUP ends the stand-in
				var exit *exec.ExitError
				if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGHUP {
					t.Fatalf("the stand-in ended with %v, want SIGHUP", err)
				}
				return
			}
			if failed == nil {
				t.Fatal("the reload of a file the gateway refuses succeeded")
			}
			if !strings.Contains(failed.Error(), tc.why) {
				t.Errorf("the failure does not say %q: %v", tc.why, failed)
			}
			if ran != 1 {
				t.Errorf("%d of the %d lines ran: the signal was sent though the file was refused", ran, len(lines))
			}
		})
	}
}

// sighupIgnored reports whether this process ignores SIGHUP (SigIgn in
// /proc/self/status: bit 0 is signal 1), as one started by nohup does.
func sighupIgnored(t *testing.T) bool {
	t.Helper()
	for _, l := range strings.Split(string(readFile(t, "/proc/self/status")), "\n") {
		if v, ok := strings.CutPrefix(l, "SigIgn:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatalf("SigIgn %q: %v", v, err)
			}
			return mask&1 != 0
		}
	}
	t.Fatal("no SigIgn in /proc/self/status")
	return false
}
