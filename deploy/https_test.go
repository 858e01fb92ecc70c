package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"vendorgate/gateway"
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
		if _, err := gateway.CheckCertificates(cfg, time.Now()); err != nil {
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

// haproxyServers are the server lines of each backend section of an
// HAProxy configuration: backend name -> "host:port options...".
func haproxyServers(t *testing.T, path string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	section, defaults := "", map[string]string{}
	for _, line := range strings.Split(string(readFile(t, path)), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 0 || strings.HasPrefix(f[0], "#"):
		case !strings.HasPrefix(line, " ") && !strings.HasPrefix(line, "\t"):
			section = strings.Join(f, " ")
		case f[0] == "default-server":
			defaults[section] = strings.Join(f[1:], " ")
		case f[0] == "server" && len(f) >= 3 && strings.HasPrefix(section, "backend "):
			name := strings.TrimPrefix(section, "backend ")
			out[name] = append(out[name], f[2]+" "+defaults[section]+" "+strings.Join(f[3:], " "))
		}
	}
	return out
}

// The compose layout with TLS at the gateways (docker-compose.tls.yml over
// docker-compose.yml): HAProxy in mode tcp sends a PROXY v2 header to the
// gateways' TLS listener and http_listen, the ports it sends to are theirs,
// the gateways read the header from HAProxy alone, their certificate is the
// secret compose mounts, the configuration loads and passes the gateway's
// checks, and haproxy -c accepts the file.
func TestComposeTLSAtTheGateway(t *testing.T) {
	const override = "docker-compose.tls.yml"
	base, over := asMap(yamlDoc(t, "docker-compose.yml")["services"]), asMap(yamlDoc(t, override)["services"])
	lbAddr := str(dig(asMap(base["lb"]), "networks", "vendorgate", "ipv4_address"))
	if lbAddr == "" {
		t.Fatal("the lb has no fixed address in docker-compose.yml")
	}
	servers := haproxyServers(t, "haproxy/haproxy-tcp.cfg")
	if !strings.Contains(string(readFile(t, "haproxy/haproxy-tcp.cfg")), "\n    mode tcp\n") {
		t.Error("haproxy-tcp.cfg: the defaults are not mode tcp")
	}
	if src := composeMountSource(asMap(over["lb"]), "/usr/local/etc/haproxy/haproxy.cfg"); src != "./haproxy/haproxy-tcp.cfg" {
		t.Errorf("the lb of %s mounts %q as haproxy.cfg, want ./haproxy/haproxy-tcp.cfg", override, src)
	}
	var published []string
	for _, p := range asList(asMap(over["lb"])["ports"]) {
		published = append(published, interpolate(str(p)))
	}
	if !slices.Contains(published, "443:8443") {
		t.Errorf("the lb publishes %v, want 443:8443 (the TLS frontend)", published)
	}
	secretFiles := asMap(yamlDoc(t, override)["secrets"])
	for _, name := range []string{"gateway-1", "gateway-2"} {
		t.Run(name, func(t *testing.T) {
			env := composeEnv(asMap(base[name]))
			for k, v := range composeEnv(asMap(over[name])) {
				env[k] = v
			}
			env["GATEWAY_INTERNAL_TOKEN"], env["GATEWAY_KEY_SIGNING_SECRETS"] = dummyToken, dummySigning
			cfg := loadGatewayConfig(t, readFile(t, "config/gateway.yaml"), env)
			if err := gateway.Check(cfg); err != nil {
				t.Fatalf("the gateway refuses the layout: %v", err)
			}
			if !cfg.ProxyProtocol || !slices.Contains(cfg.TrustedProxies, lbAddr) {
				t.Errorf("proxy_protocol %v, trusted_proxies %v: want the PROXY header read from the lb (%s)", cfg.ProxyProtocol, cfg.TrustedProxies, lbAddr)
			}
			var secrets []string
			for _, s := range asList(asMap(over[name])["secrets"]) {
				secrets = append(secrets, "/run/secrets/"+str(s))
				if src := str(dig(secretFiles, str(s), "file")); !strings.HasPrefix(src, "./tls/") {
					t.Errorf("secret %s comes from %q, want ./tls/ (kept out of git)", s, src)
				}
			}
			for _, f := range []string{cfg.TLS.CertFile, cfg.TLS.KeyFile} {
				if !slices.Contains(secrets, f) {
					t.Errorf("tls file %q is not a secret compose mounts (%v)", f, secrets)
				}
			}
			// HAProxy sends to this gateway's listeners, with the header.
			for backend, port := range map[string]int{"gateways_tls": portOf(t, cfg.Listen), "gateways_plain": portOf(t, cfg.HTTPListen)} {
				want := name + ":" + strconv.Itoa(port) + " "
				found := false
				for _, s := range servers[backend] {
					if strings.HasPrefix(s, want) {
						found = true
						if !strings.Contains(s, "send-proxy-v2") {
							t.Errorf("haproxy-tcp.cfg %s: %s sends no PROXY v2 header", backend, s)
						}
					}
				}
				if !found {
					t.Errorf("haproxy-tcp.cfg %s has no server %s (%v)", backend, want, servers[backend])
				}
			}
		})
	}
	if !strings.Contains(string(readFile(t, ".gitignore")), "tls/") {
		t.Error("deploy/.gitignore does not keep tls/ (the private key) out of git")
	}
	documented := envFileNames(t, ".env.example")
	for _, m := range interp.FindAllStringSubmatch(string(readFile(t, override)), -1) {
		if _, ok := documented[m[1]]; !ok {
			t.Errorf("%s uses ${%s}, which .env.example does not list", override, m[1])
		}
	}

	haproxy, err := exec.LookPath("haproxy")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("haproxy not on PATH in CI")
		}
		t.Skip("haproxy not on PATH")
	}
	out, err := exec.Command(haproxy, "-c", "-f", "haproxy/haproxy-tcp.cfg").CombinedOutput()
	if err != nil {
		t.Fatalf("haproxy -c: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "[WARNING]") && !strings.Contains(line, "could not resolve address") {
			t.Errorf("haproxy -c: %s", line)
		}
	}
}

// The Kubernetes layout with TLS at the gateways (overlays/gateway-tls), as
// kubectl builds it: the gateway's configuration (ConfigMap and environment)
// loads and passes the gateway's checks, reads the PROXY header from the
// balancer, serves the certificate of a kubernetes.io/tls Secret mounted
// where its files are named and readable by its group, and the Service sends
// 443 and 80 to its TLS listener and http_listen.
func TestK8sGatewayTLS(t *testing.T) {
	const overlay = "k8s/overlays/gateway-tls"
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		if os.Getenv("CI") != "" { // .ci/run installs it: a skip there would hide the test
			t.Fatal("kubectl not on PATH in CI (Debian package: kubectl)")
		}
		t.Skip("kubectl not on PATH: the overlay is not built")
	}
	out, err := exec.Command(kubectl, "kustomize", overlay).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v", overlay, err)
	}
	docs, err := decodeYAMLDocs(out)
	if err != nil {
		t.Fatal(err)
	}
	var objs []k8sObject
	for _, d := range docs {
		objs = append(objs, k8sObject{overlay, asMap(d)})
	}
	dep := k8sFind(objs, "Deployment", "vendorgate-gateway")
	if dep == nil {
		t.Fatal("no gateway Deployment")
	}
	pod := asMap(dig(dep, "spec", "template", "spec"))
	var c container
	for _, ct := range asList(pod["containers"]) {
		if str(asMap(ct)["name"]) == "gateway" {
			c = container{overlay + " gateway", str(asMap(ct)["image"]), asMap(ct), pod, dep}
		}
	}
	if c.spec == nil {
		t.Fatal("no gateway container")
	}
	env := containerEnv(t, objs, c)
	env["GATEWAY_INTERNAL_TOKEN"], env["GATEWAY_KEY_SIGNING_SECRETS"] = dummyToken, dummySigning
	cfg := loadGatewayConfig(t, []byte(mountedConfig(t, objs, c)), env)
	if err := gateway.Check(cfg); err != nil {
		t.Fatalf("the gateway refuses the layout: %v", err)
	}
	if !cfg.TLS.Enabled() || !cfg.ProxyProtocol || len(cfg.TrustedProxies) == 0 || !strings.HasPrefix(cfg.PublicBaseURL, "https://") {
		t.Errorf("tls %v, proxy_protocol %v, trusted_proxies %v, public_base_url %q: want HTTPS behind a PROXY-protocol balancer",
			cfg.TLS.Enabled(), cfg.ProxyProtocol, cfg.TrustedProxies, cfg.PublicBaseURL)
	}

	// The certificate files are the keys of a kubernetes.io/tls Secret,
	// mounted read-only where the configuration names them.
	wantKeys := map[string]string{cfg.TLS.CertFile: "tls.crt", cfg.TLS.KeyFile: "tls.key"}
	for file, key := range wantKeys {
		found := false
		for _, m := range asList(c.spec["volumeMounts"]) {
			m := asMap(m)
			if filepath.Dir(file) != str(m["mountPath"]) || filepath.Base(file) != key {
				continue
			}
			for _, v := range asList(pod["volumes"]) {
				v := asMap(v)
				if str(v["name"]) == str(m["name"]) && dig(v, "secret", "secretName") != nil {
					found = str(m["readOnly"]) == "true"
					if mode := str(dig(v, "secret", "defaultMode")); mode != "288" || str(dig(pod, "securityContext", "fsGroup")) != str(dig(pod, "securityContext", "runAsGroup")) {
						// 288 is 0440: the key readable by the gateway's group alone.
						t.Errorf("the TLS Secret's mode %s and fsGroup %v: want 0440 and the gateway's group", mode, dig(pod, "securityContext", "fsGroup"))
					}
				}
			}
		}
		if !found {
			t.Errorf("%s is not key %s of a Secret mounted read-only at %s", file, key, filepath.Dir(file))
		}
	}

	svc := k8sFind(objs, "Service", "vendorgate-gateway")
	targets := map[string]int{}
	for _, p := range asList(dig(svc, "spec", "ports")) {
		p := asMap(p)
		targets[str(p["port"])] = containerPort(c.spec, p["targetPort"])
	}
	if targets["443"] != portOf(t, cfg.Listen) || targets["80"] != portOf(t, cfg.HTTPListen) {
		t.Errorf("the Service sends 443 to %d and 80 to %d; the gateway listens for TLS on %s and plain HTTP on %s",
			targets["443"], targets["80"], cfg.Listen, cfg.HTTPListen)
	}
	if str(dig(svc, "spec", "type")) != "LoadBalancer" {
		t.Errorf("the Service is %v, want a LoadBalancer (TCP, TLS passed through)", dig(svc, "spec", "type"))
	}
}
