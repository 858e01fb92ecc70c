package deploy

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"vendorgate/gateway"
	"vendorgate/gateway/edgetls"
	"vendorgate/shared/testcert"
)

// unitEnv is the environment a unit gives its process: its Environment=
// lines, in order (a later one wins), %d read as credDir.
func unitEnv(u unit, credDir string) map[string]string {
	env := map[string]string{}
	for _, v := range u["Service"]["Environment"] {
		for _, kv := range strings.Fields(v) {
			k, val, _ := strings.Cut(strings.Trim(kv, `"`), "=")
			env[k] = strings.ReplaceAll(val, "%d", credDir)
		}
	}
	return env
}

// gatewayUnitWith is the gateway's unit with a drop-in: the text systemd
// reads (the drop-in's lines after the unit's), parsed.
func gatewayUnitWith(t *testing.T, dropIn string) (text string, u unit) {
	t.Helper()
	text = string(readFile(t, "systemd/vendorgate-gateway.service")) + "\n" + string(readFile(t, dropIn))
	p := filepath.Join(t.TempDir(), "vendorgate-gateway.service")
	if err := writeFile(p, text); err != nil {
		t.Fatal(err)
	}
	return text, parseUnit(t, p)
}

// The gateway's unit serves HTTPS with either drop-in: it may bind 443 and
// 80 (CAP_NET_BIND_SERVICE, and nothing more), the certificate and key come
// through LoadCredential= at the paths the configuration names, and ACME
// keeps its storage in the unit's StateDirectory. Each layout's configuration
// loads through the config package, and the certificate the credentials
// hand over loads as the gateway loads it.
func TestSystemdHTTPS(t *testing.T) {
	base := parseUnit(t, "systemd/vendorgate-gateway.service")
	for k, want := range map[string]string{"AmbientCapabilities": "CAP_NET_BIND_SERVICE", "CapabilityBoundingSet": "CAP_NET_BIND_SERVICE",
		"StateDirectory": "vendorgate-gateway", "DynamicUser": "yes"} {
		if got := base.get("Service", k); got != want {
			t.Errorf("[Service] %s=%q, want %q", k, got, want)
		}
	}
	secrets := map[string]string{"GATEWAY_INTERNAL_TOKEN": dummyToken, "GATEWAY_KEY_SIGNING_SECRETS": dummySigning}
	credDir := t.TempDir()

	t.Run("certificate files", func(t *testing.T) {
		text, u := gatewayUnitWith(t, "systemd/vendorgate-gateway.service.d/https-files.conf")
		creds := map[string]string{} // id -> source
		for _, v := range u["Service"]["LoadCredential"] {
			id, src, ok := strings.Cut(v, ":")
			if !ok || !strings.HasPrefix(src, "/etc/vendorgate/") {
				t.Errorf("LoadCredential=%s: want id:/etc/vendorgate/...", v)
			}
			creds[id] = src
		}
		env := unitEnv(u, credDir)
		for _, name := range []string{"GATEWAY_TLS_CERT_FILE", "GATEWAY_TLS_KEY_FILE"} {
			id, ok := strings.CutPrefix(env[name], credDir+"/")
			if _, loaded := creds[id]; !ok || !loaded {
				t.Errorf("%s=%q is not a file LoadCredential= hands over (%v)", name, env[name], creds)
			}
		}
		// The credentials as systemd would copy them: a real pair.
		leaf := testcert.NewCA(t).Issue(t, time.Now().Add(time.Hour), "api.example.com")
		testcert.WriteFile(t, env["GATEWAY_TLS_CERT_FILE"], leaf.CertPEM)
		testcert.WriteFile(t, env["GATEWAY_TLS_KEY_FILE"], leaf.KeyPEM)
		for k, v := range secrets {
			env[k] = v
		}
		cfg := loadGatewayConfig(t, readFile(t, "config/gateway.yaml"), env)
		if portOf(t, cfg.Listen) != 443 || portOf(t, cfg.HTTPListen) != 80 {
			t.Errorf("listen %q, http_listen %q: want 443 and 80", cfg.Listen, cfg.HTTPListen)
		}
		if err := gateway.Check(cfg); err != nil {
			t.Fatalf("the gateway refuses the layout: %v", err)
		}
		if _, err := edgetls.Load(cfg.TLS.Files(), nil); err != nil {
			t.Fatalf("the certificate handed over does not load: %v", err)
		}
		verifyUnit(t, text)
	})

	t.Run("acme", func(t *testing.T) {
		text, u := gatewayUnitWith(t, "systemd/vendorgate-gateway.service.d/https-acme.conf")
		if len(u["Service"]["LoadCredential"]) != 0 {
			t.Error("the ACME layout loads credentials: it has no files to hand over")
		}
		env := unitEnv(u, credDir)
		for k, v := range secrets {
			env[k] = v
		}
		cfg := loadGatewayConfig(t, readFile(t, "config/gateway.yaml"), env)
		if !strings.HasPrefix(cfg.TLS.ACME.Storage, "/var/lib/"+u.get("Service", "StateDirectory")+"/") {
			t.Errorf("tls.acme.storage %q is not in the StateDirectory %q", cfg.TLS.ACME.Storage, u.get("Service", "StateDirectory"))
		}
		if len(cfg.TLS.ACME.Domains) == 0 || portOf(t, cfg.Listen) != 443 || portOf(t, cfg.HTTPListen) != 80 {
			t.Errorf("domains %v, listen %q, http_listen %q: want domains, 443 and 80", cfg.TLS.ACME.Domains, cfg.Listen, cfg.HTTPListen)
		}
		if err := gateway.Check(cfg); err != nil {
			t.Fatalf("the gateway refuses the layout: %v", err)
		}
		verifyUnit(t, text)
	})
}

// verifyUnit runs systemd's own check on a unit's text, the binary (not
// installed here) replaced by /bin/true.
func verifyUnit(t *testing.T, text string) {
	t.Helper()
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("systemd-analyze not on PATH: unit syntax not verified")
		return
	}
	text = strings.ReplaceAll(text, "/usr/local/bin/gateway", "/bin/true")
	tmp := filepath.Join(t.TempDir(), "vendorgate-gateway.service")
	if err := writeFile(tmp, text); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", tmp).CombinedOutput()
	if err != nil || strings.Contains(string(out), filepath.Base(tmp)+":") {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}
