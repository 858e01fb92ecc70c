package deploy

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
				want["Service"]["ExecReload"] = "/bin/kill -HUP $MAINPID"
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
