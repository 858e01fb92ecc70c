package deploy

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"vendorgate/config"
)

const scaleOutCompose = "docker-compose.scale-out.yml"

// loadGatewayConfig and loadBackendConfig load a configuration the way the
// binary would (file text, then environment), failing the test when it
// would refuse to start.
func loadGatewayConfig(t *testing.T, text []byte, env map[string]string) *config.Gateway {
	t.Helper()
	path := ""
	if len(text) > 0 {
		path = filepath.Join(t.TempDir(), "gateway.yaml")
		if err := os.WriteFile(path, text, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := config.LoadGateway(path, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatalf("gateway configuration does not load: %v", err)
	}
	return cfg
}

func loadBackendConfig(t *testing.T, text []byte, env map[string]string) *config.Backend {
	t.Helper()
	path := ""
	if len(text) > 0 {
		path = filepath.Join(t.TempDir(), "backend.yaml")
		if err := os.WriteFile(path, text, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := config.LoadBackend(path, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatalf("backend configuration does not load: %v", err)
	}
	return cfg
}

// hostPort splits a URL's host and port.
func hostPort(t *testing.T, raw string) (string, int) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("%q: %v", raw, err)
	}
	p, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatalf("%q has no numeric port", raw)
	}
	return u.Hostname(), p
}

func profilesOf(svc map[string]any) []string {
	var out []string
	for _, p := range asList(svc["profiles"]) {
		out = append(out, str(p))
	}
	return out
}

// commandFlag is the value after flag in a command list.
func commandFlag(svc map[string]any, flag string) string {
	return flagValue(asList(svc["command"]), flag)
}

// The scale-out compose stack: PostgreSQL under the postgres profile, three
// cluster-enabled redis:7 nodes and a one-shot `redis-cli --cluster create`
// under redis-cluster, two backends on one PostgreSQL database sharing a
// reports volume, two gateways over both backends and the cluster, and the
// same port, token and variable rules as the single-backend stack.
func TestScaleOutCompose(t *testing.T) {
	doc := yamlDoc(t, scaleOutCompose)
	services := asMap(doc["services"])
	volumes := asMap(doc["volumes"])
	nodes := []string{"redis-node-1", "redis-node-2", "redis-node-3"}
	for _, s := range append([]string{"postgres", "redis-cluster-init", "backend-1", "backend-2", "gateway-1", "gateway-2", "lb", "prometheus", "vendorctl"}, nodes...) {
		if services[s] == nil {
			t.Errorf("no %s service", s)
		}
	}
	wantProfiles := map[string][]string{"postgres": {"postgres"}, "redis-cluster-init": {"redis-cluster"}, "vendorctl": {"tools"}}
	for _, n := range nodes {
		wantProfiles[n] = []string{"redis-cluster"}
	}
	for name, svc := range services {
		if got, want := profilesOf(asMap(svc)), wantProfiles[name]; !slices.Equal(got, want) {
			t.Errorf("%s: profiles %v, want %v", name, got, want)
		}
	}

	// Every dependency on a profile's service is optional, so the app tier
	// also starts against a managed PostgreSQL and Redis Cluster.
	for name, svc := range services {
		for dep, cond := range asMap(asMap(svc)["depends_on"]) {
			if len(profilesOf(asMap(services[dep]))) > 0 && len(profilesOf(asMap(svc))) == 0 && str(asMap(cond)["required"]) != "false" {
				t.Errorf("%s depends on %s (profile %v) without required: false", name, dep, profilesOf(asMap(services[dep])))
			}
			if services[dep] == nil {
				t.Errorf("%s depends on %s, which is not a service", name, dep)
			}
		}
	}

	// PostgreSQL.
	pg := asMap(services["postgres"])
	if img := str(pg["image"]); !strings.HasPrefix(img, "postgres:") {
		t.Errorf("postgres image %q", img)
	}
	pgEnv := composeRawEnv(pg)
	if !regexp.MustCompile(`^\$\{[A-Z0-9_]+:\?[^}]+\}$`).MatchString(str(pgEnv["POSTGRES_PASSWORD"])) {
		t.Errorf("POSTGRES_PASSWORD = %q: want ${VAR:?message}", str(pgEnv["POSTGRES_PASSWORD"]))
	}
	if !slices.Contains(asList(pg["expose"]), any("5432")) {
		t.Errorf("postgres exposes %v, want 5432", pg["expose"])
	}
	if len(asList(dig(pg, "healthcheck", "test"))) == 0 {
		t.Error("postgres has no healthcheck for the backends to wait on")
	}

	// The Redis Cluster: cluster-enabled nodes on 6379 (bus 16379), each
	// with its own volume for nodes.conf, joined by the init container.
	for _, n := range nodes {
		svc := asMap(services[n])
		if img := str(svc["image"]); img != "redis:7" {
			t.Errorf("%s image %q, want redis:7", n, img)
		}
		if commandFlag(svc, "--cluster-enabled") != "yes" || commandFlag(svc, "--port") != "6379" {
			t.Errorf("%s: command %v, want --cluster-enabled yes --port 6379", n, svc["command"])
		}
		if got := commandFlag(svc, "--cluster-announce-hostname"); got != n {
			t.Errorf("%s announces hostname %q", n, got)
		}
		exp := fmt.Sprint(asList(svc["expose"]))
		if exp != "[6379 16379]" {
			t.Errorf("%s exposes %s, want the client port and the cluster bus [6379 16379]", n, exp)
		}
		vol := strings.Split(str(asList(svc["volumes"])[0]), ":")
		if _, ok := volumes[vol[0]]; !ok || vol[1] != "/data" {
			t.Errorf("%s keeps nodes.conf on %v, want a named volume at /data", n, vol)
		}
	}
	initSvc := asMap(services["redis-cluster-init"])
	script := strings.Join(func() []string {
		var s []string
		for _, a := range append(asList(initSvc["entrypoint"]), asList(initSvc["command"])...) {
			s = append(s, str(a))
		}
		return s
	}(), " ")
	for _, want := range []string{"redis-cli --cluster create", "--cluster-yes", "cluster_state:ok"} {
		if !strings.Contains(script, want) {
			t.Errorf("redis-cluster-init does not run %q: %s", want, script)
		}
	}
	for _, n := range nodes {
		if !strings.Contains(script, "ip "+n+")") {
			t.Errorf("redis-cluster-init does not join %s", n)
		}
		if str(dig(initSvc, "depends_on", n, "condition")) != "service_healthy" {
			t.Errorf("redis-cluster-init does not wait for %s to be healthy", n)
		}
	}
	if str(initSvc["restart"]) != "no" {
		t.Errorf("redis-cluster-init restart %q, want \"no\" (one-shot)", str(initSvc["restart"]))
	}

	// The vendorgate services, loaded through the config package.
	documented := envFileNames(t, ".env.example")
	known := configEnvNames(t)
	type listeners struct{ listen, admin int }
	ports := map[string]listeners{}
	gateways := map[string]*config.Gateway{}
	backends := map[string]*config.Backend{}
	for name, svc := range services {
		svc := asMap(svc)
		bin := binary(str(svc["image"]))
		if bin == "" {
			continue
		}
		env := composeEnv(svc)
		for k := range env {
			if !known[k] && !runtimeEnv[k] {
				t.Errorf("%s sets %s, which is not a setting in config/*.go", name, k)
			}
		}
		if bin == "vendorctl" {
			continue
		}
		// The database URL is required (${VAR:?}); check the documented one.
		if _, ok := env["BACKEND_DATABASE"]; ok {
			env["BACKEND_DATABASE"] = documented["VENDORGATE_DATABASE_URL"]
		}
		var text []byte
		if cfgPath := commandFlag(svc, "-config"); cfgPath != "" {
			host := composeMountSource(svc, cfgPath)
			if host == "" {
				t.Fatalf("%s: -config %s is not a mounted file", name, cfgPath)
			}
			text = readFile(t, host)
		}
		eff := loadConfig(t, bin, text, env)
		for _, addr := range []string{eff.listen, eff.admin} {
			if !reachable(t, addr) {
				t.Errorf("%s listens on %s: unreachable from the other containers", name, addr)
			}
		}
		p := listeners{portOf(t, eff.listen), portOf(t, eff.admin)}
		ports[name] = p
		for _, e := range asList(svc["expose"]) {
			if n, _ := strconv.Atoi(str(e)); n != p.listen && n != p.admin {
				t.Errorf("%s exposes %s; it listens on %d and %d", name, str(e), p.listen, p.admin)
			}
		}
		for _, pub := range asList(svc["ports"]) {
			parts := strings.Split(interpolate(str(pub)), ":")
			if n, _ := strconv.Atoi(parts[len(parts)-1]); n != p.admin {
				t.Errorf("%s publishes %s; only its admin port %d, on loopback, is for the host", name, str(pub), p.admin)
			}
			if !strings.HasPrefix(str(pub), "127.0.0.1:") {
				t.Errorf("%s publishes %s beyond the host's loopback", name, str(pub))
			}
		}
		if d, err := time.ParseDuration(str(svc["stop_grace_period"])); err != nil || d.Seconds() <= eff.grace {
			t.Errorf("%s: stop_grace_period %q must exceed shutdown_grace (%vs)", name, str(svc["stop_grace_period"]), eff.grace)
		}
		if str(svc["read_only"]) != "true" {
			t.Errorf("%s: read_only is not true", name)
		}
		switch bin {
		case "gateway":
			gateways[name] = loadGatewayConfig(t, text, env)
		case "backend":
			backends[name] = loadBackendConfig(t, text, env)
		}
	}
	if len(gateways) != 2 || len(backends) != 2 {
		t.Fatalf("%d gateways and %d backends, want 2 and 2", len(gateways), len(backends))
	}

	clusterURLs := func(where string, urls []string) {
		t.Helper()
		var hosts []string
		for _, u := range urls {
			h, p := hostPort(t, u)
			if p != 6379 {
				t.Errorf("%s: %s, want the nodes' port 6379", where, u)
			}
			hosts = append(hosts, h)
		}
		sort.Strings(hosts)
		if !slices.Equal(hosts, nodes) {
			t.Errorf("%s lists Redis hosts %v, want the cluster's nodes %v", where, hosts, nodes)
		}
	}
	// Backends: one PostgreSQL database on the postgres service, reports on
	// one shared named volume, invalidations into the cluster.
	var reportVolumes []string
	for name, cfg := range backends {
		if !cfg.IsPostgres() {
			t.Errorf("%s database is not a postgres:// URL", name)
		} else if h, p := hostPort(t, cfg.Database); h != "postgres" || p != 5432 {
			t.Errorf("%s database at %s:%d, want the postgres service on 5432", name, h, p)
		}
		clusterURLs(name+" redis_url", cfg.RedisURL)
		vol := ""
		for _, v := range asList(dig(services, name, "volumes")) {
			parts := strings.Split(str(v), ":")
			if _, named := volumes[parts[0]]; named && len(parts) >= 2 && strings.HasPrefix(cfg.ReportsDir+"/", strings.TrimSuffix(parts[1], "/")+"/") {
				vol = parts[0]
			}
		}
		if vol == "" {
			t.Errorf("%s reports_dir %q is not on a named volume", name, cfg.ReportsDir)
		}
		reportVolumes = append(reportVolumes, vol)
	}
	if reportVolumes[0] != reportVolumes[1] {
		t.Errorf("the backends keep reports on different volumes %v: a report one writes, the other could not serve", reportVolumes)
	}
	if d0, d1 := composeEnv(asMap(services["backend-1"]))["BACKEND_DATABASE"], composeEnv(asMap(services["backend-2"]))["BACKEND_DATABASE"]; d0 != d1 {
		t.Error("the backends are given different databases")
	}

	// Gateways: both backends' main listeners, the cluster.
	for name, cfg := range gateways {
		var got []string
		for _, u := range cfg.BackendURL {
			h, p := hostPort(t, u)
			if bp, ok := ports[h]; !ok || bp.listen != p {
				t.Errorf("%s backend_url %s is not a backend service's main listener", name, u)
			}
			got = append(got, h)
		}
		sort.Strings(got)
		if !slices.Equal(got, []string{"backend-1", "backend-2"}) {
			t.Errorf("%s balances over %v, want backend-1 and backend-2", name, got)
		}
		clusterURLs(name+" redis.url", cfg.Redis.URL)
		if cfg.Redis.MasterName != "" {
			t.Errorf("%s sets a Sentinel master name on a cluster", name)
		}
	}

	// Tokens, variables, the load balancer, Prometheus, host paths.
	required := regexp.MustCompile(`^\$\{([A-Z0-9_]+):\?[^}]+\}$`)
	tokenVars := map[string]bool{}
	for name, svc := range services {
		for k, v := range composeRawEnv(asMap(svc)) {
			if strings.HasSuffix(k, "_TOKEN") {
				m := required.FindStringSubmatch(str(v))
				if m == nil {
					t.Errorf("%s %s = %q: want ${VAR:?message}", name, k, str(v))
					continue
				}
				if strings.HasSuffix(k, "INTERNAL_TOKEN") {
					tokenVars[m[1]] = true
				}
			}
		}
	}
	if len(tokenVars) != 1 {
		t.Errorf("the internal tokens come from %d variables %v, want one shared by gateways and backends", len(tokenVars), tokenVars)
	}
	for _, m := range interp.FindAllStringSubmatch(string(readFile(t, scaleOutCompose)), -1) {
		if _, ok := documented[m[1]]; !ok {
			t.Errorf("%s uses ${%s}, which .env.example does not list", scaleOutCompose, m[1])
		}
	}
	hap := string(readFile(t, "haproxy/haproxy.cfg"))
	for _, s := range regexp.MustCompile(`(?m)^\s*server (\S+) (\S+):(\d+)`).FindAllStringSubmatch(hap, -1) {
		if n, _ := strconv.Atoi(s[3]); gateways[s[2]] == nil || ports[s[2]].listen != n {
			t.Errorf("haproxy server %s %s:%s is not a gateway's public listener here", s[1], s[2], s[3])
		}
	}
	lbAddr := str(dig(services, "lb", "networks", "vendorgate", "ipv4_address"))
	subnet := str(dig(asList(dig(doc, "networks", "vendorgate", "ipam", "config"))[0], "subnet"))
	_, cidr, err := net.ParseCIDR(subnet)
	if err != nil || !cidr.Contains(net.ParseIP(lbAddr)) {
		t.Errorf("lb address %q is not in the network's subnet %q", lbAddr, subnet)
	}
	for name := range gateways {
		if got := composeEnv(asMap(services[name]))["GATEWAY_TRUSTED_PROXIES"]; got != lbAddr {
			t.Errorf("%s trusts X-Forwarded-For from %q, the load balancer is at %q", name, got, lbAddr)
		}
	}
	if got := str(dig(doc, "networks", "vendorgate", "name")); got == "vendorgate" {
		t.Error("the scale-out network is named like the single-backend stack's: both could not run on one host")
	}

	promCfg := ""
	for _, a := range asList(dig(services, "prometheus", "command")) {
		if v, ok := strings.CutPrefix(str(a), "--config.file=/etc/prometheus/"); ok {
			promCfg = "prometheus/" + v
		}
	}
	if promCfg == "" || composeMountSource(asMap(services["prometheus"]), "/etc/prometheus") != "./prometheus" {
		t.Fatalf("prometheus does not read a config file from the mounted ./prometheus")
	}
	prom := yamlDoc(t, promCfg)
	scraped := map[string]bool{}
	jobs := map[string]bool{}
	for _, sc := range asList(prom["scrape_configs"]) {
		sc := asMap(sc)
		jobs[str(sc["job_name"])] = true
		for _, st := range asList(sc["static_configs"]) {
			for _, target := range asList(asMap(st)["targets"]) {
				host, port, _ := strings.Cut(str(target), ":")
				if p, ok := ports[host]; ok {
					if n, _ := strconv.Atoi(port); n != p.admin {
						t.Errorf("%s: target %s, /metrics is on its admin port %d", promCfg, str(target), p.admin)
					}
					scraped[host] = true
				} else if strings.HasPrefix(str(sc["job_name"]), "vendorgate-") {
					t.Errorf("%s: target %s is not a vendorgate service here", promCfg, str(target))
				}
			}
		}
	}
	for name := range ports {
		if !scraped[name] {
			t.Errorf("%s does not scrape %s", promCfg, name)
		}
	}
	for _, q := range alertQueries(t) {
		for _, m := range regexp.MustCompile(`job="([^"]+)"`).FindAllStringSubmatch(q.expr, -1) {
			if !jobs[m[1]] {
				t.Errorf("%s: alerts select job %q, which it does not scrape", promCfg, m[1])
			}
		}
	}
	if files := asList(prom["rule_files"]); len(files) != 1 || str(files[0]) != "alerts.yml" {
		t.Errorf("%s: rule_files %v, want [alerts.yml]", promCfg, files)
	}
	if promtool, err := exec.LookPath("promtool"); err == nil {
		cmd := exec.Command(promtool, "check", "config", filepath.Base(promCfg))
		cmd.Dir = "prometheus"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool check config %s: %v\n%s", promCfg, err, out)
		}
	}
	for name, svc := range services {
		for _, v := range asList(asMap(svc)["volumes"]) {
			src := strings.Split(str(v), ":")[0]
			if strings.HasPrefix(src, ".") {
				if _, err := os.Stat(src); err != nil {
					t.Errorf("%s mounts %s, which does not exist", name, src)
				}
			} else if _, ok := volumes[src]; !ok {
				t.Errorf("%s mounts volume %s, which is not declared", name, src)
			}
		}
		if b := asMap(asMap(svc)["build"]); b != nil {
			if _, err := os.Stat(filepath.Join(str(b["context"]), str(b["dockerfile"]))); err != nil {
				t.Errorf("%s builds from %s/%s, which does not exist", name, str(b["context"]), str(b["dockerfile"]))
			}
		}
	}
}

const overlay = "k8s/overlays/scale-out"

// The scale-out overlay: every file it names exists and parses; the backend
// runs two replicas rolling one at a time, reads its PostgreSQL URL from a
// Secret and the cluster's nodes from a ConfigMap the gateways read too,
// and keeps reports on a ReadWriteMany volume; a PodDisruptionBudget keeps
// one backend up. With kubectl, the built overlay is checked as deployed.
func TestScaleOutKustomize(t *testing.T) {
	kust := yamlDoc(t, overlay+"/kustomization.yaml")
	if ns := str(kust["namespace"]); ns != "vendorgate" {
		t.Errorf("overlay namespace %q", ns)
	}
	var objs []k8sObject
	resources := asList(kust["resources"])
	if len(resources) == 0 || str(resources[0]) != "../../base" {
		t.Errorf("resources %v: want the base (../../base) first", resources)
	}
	for _, r := range resources[1:] {
		p := filepath.Join(overlay, str(r))
		for _, d := range yamlDocs(t, p) {
			objs = append(objs, k8sObject{p, asMap(d)})
		}
	}
	// Files under the overlay are all used.
	used := map[string]bool{"kustomization.yaml": true}
	for _, r := range resources {
		used[str(r)] = true
	}
	var patchDocs []map[string]any
	for _, p := range asList(kust["patches"]) {
		if path := str(asMap(p)["path"]); path != "" {
			used[path] = true
			for _, d := range yamlDocs(t, filepath.Join(overlay, path)) {
				patchDocs = append(patchDocs, asMap(d))
			}
		}
	}
	entries, err := os.ReadDir(overlay)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !used[e.Name()] {
			t.Errorf("%s/%s is not used by the kustomization", overlay, e.Name())
		}
	}

	find := func(docs []map[string]any, kind, name string) map[string]any {
		for _, d := range docs {
			if str(d["kind"]) == kind && str(dig(d, "metadata", "name")) == name {
				return d
			}
		}
		return nil
	}
	backend := find(patchDocs, "Deployment", "vendorgate-backend")
	gateway := find(patchDocs, "Deployment", "vendorgate-gateway")
	if backend == nil || gateway == nil {
		t.Fatal("the overlay patches neither the backend nor the gateway Deployment")
	}
	if r := str(dig(backend, "spec", "replicas")); r != "2" {
		t.Errorf("backend replicas %s, want 2", r)
	}
	if s := str(dig(backend, "spec", "strategy", "type")); s != "RollingUpdate" {
		t.Errorf("backend strategy %s, want RollingUpdate (replicas on one database roll one at a time)", s)
	}
	if u := str(dig(backend, "spec", "strategy", "rollingUpdate", "maxUnavailable")); u != "0" {
		t.Errorf("backend maxUnavailable %s, want 0", u)
	}
	envOf := func(dep map[string]any) map[string]map[string]any {
		out := map[string]map[string]any{}
		for _, c := range asList(dig(dep, "spec", "template", "spec", "containers")) {
			for _, e := range asList(asMap(c)["env"]) {
				out[str(asMap(e)["name"])] = asMap(e)
			}
		}
		return out
	}
	known := configEnvNames(t)
	benv, genv := envOf(backend), envOf(gateway)
	for _, env := range []map[string]map[string]any{benv, genv} {
		for k := range env {
			if !known[k] && !runtimeEnv[k] {
				t.Errorf("the overlay sets %s, which is not a setting in config/*.go", k)
			}
		}
	}
	if ref := asMap(dig(benv["BACKEND_DATABASE"], "valueFrom", "secretKeyRef")); str(ref["name"]) == "" || str(ref["key"]) == "" {
		t.Errorf("BACKEND_DATABASE does not come from a Secret (secretKeyRef): %v", benv["BACKEND_DATABASE"])
	}
	cmRef := func(e map[string]any, name string) map[string]any {
		ref := asMap(dig(e, "valueFrom", "configMapKeyRef"))
		if ref == nil {
			t.Errorf("%s does not come from a ConfigMap", name)
		}
		return ref
	}
	bref, gref := cmRef(benv["BACKEND_REDIS_URL"], "BACKEND_REDIS_URL"), cmRef(genv["GATEWAY_REDIS_URL"], "GATEWAY_REDIS_URL")
	if fmt.Sprint(bref) != fmt.Sprint(gref) {
		t.Errorf("backends publish to %v, gateways limit in %v: the same cluster", bref, gref)
	}
	cm := find(func() []map[string]any {
		var out []map[string]any
		for _, o := range objs {
			out = append(out, o.doc)
		}
		return out
	}(), "ConfigMap", str(gref["name"]))
	urls := strings.Split(str(dig(cm, "data", str(gref["key"]))), ",")
	if len(urls) < 3 {
		t.Errorf("ConfigMap %s key %s lists %d Redis nodes, want the cluster's 3 masters", str(gref["name"]), str(gref["key"]), len(urls))
	}
	env := map[string]string{"GATEWAY_REDIS_URL": strings.Join(urls, ","), "GATEWAY_INTERNAL_TOKEN": dummyToken,
		"GATEWAY_KEY_SIGNING_SECRETS": dummySigning}
	if cfg := loadGatewayConfig(t, nil, env); len(cfg.Redis.URL) != len(urls) {
		t.Errorf("the gateway reads %d Redis URLs from %v", len(cfg.Redis.URL), urls)
	}
	for _, u := range urls {
		if _, p := hostPort(t, u); p != 6379 {
			t.Errorf("cluster node %s: want port 6379", u)
		}
	}

	var claim string
	for _, v := range asList(dig(backend, "spec", "template", "spec", "volumes")) {
		if str(asMap(v)["name"]) == "data" {
			claim = str(dig(v, "persistentVolumeClaim", "claimName"))
		}
	}
	pvc := find(func() []map[string]any {
		var out []map[string]any
		for _, o := range objs {
			out = append(out, o.doc)
		}
		return out
	}(), "PersistentVolumeClaim", claim)
	if pvc == nil {
		t.Errorf("the backend's data volume is claim %q, which the overlay does not define", claim)
	} else if modes := fmt.Sprint(dig(pvc, "spec", "accessModes")); modes != "[ReadWriteMany]" {
		t.Errorf("claim %s access modes %s, want [ReadWriteMany]: two backends share the reports", claim, modes)
	}
	pdbOK := false
	for _, o := range objs {
		if o.kind() == "PodDisruptionBudget" && str(dig(o.doc, "spec", "selector", "matchLabels", "app.kubernetes.io/name")) == "vendorgate-backend" {
			pdbOK = str(dig(o.doc, "spec", "minAvailable")) == "1"
		}
	}
	if !pdbOK {
		t.Error("no PodDisruptionBudget keeping one backend available (minAvailable: 1)")
	}

	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Log("kubectl not on PATH: the built overlay is not checked")
		return
	}
	out, err := exec.Command(kubectl, "kustomize", overlay).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", overlay, err, out)
	}
	docs, err := decodeYAMLDocs(out)
	if err != nil {
		t.Fatal(err)
	}
	var built []k8sObject
	for _, d := range docs {
		built = append(built, k8sObject{"built", asMap(d)})
	}
	for _, gone := range [][2]string{{"Deployment", "vendorgate-redis"}, {"Service", "vendorgate-redis"}, {"PersistentVolumeClaim", "vendorgate-redis-data"}, {"PersistentVolumeClaim", "vendorgate-backend-data"}} {
		if k8sFind(built, gone[0], gone[1]) != nil {
			t.Errorf("the built overlay still holds %s %s", gone[0], gone[1])
		}
	}
	for _, o := range built {
		if o.kind() != "Deployment" {
			continue
		}
		pod := asMap(dig(o.doc, "spec", "template", "spec"))
		for _, c := range asList(pod["containers"]) {
			c := container{"built " + o.name(), str(asMap(c)["image"]), asMap(c), pod, o.doc}
			bin := binary(c.image)
			if bin == "" {
				t.Errorf("the built overlay runs %s (%s): the Redis Cluster belongs to an operator", o.name(), c.image)
				continue
			}
			text := []byte(mountedConfig(t, built, c))
			env := containerEnv(t, built, c)
			switch bin {
			case "backend":
				if str(dig(o.doc, "spec", "replicas")) != "2" || str(dig(o.doc, "spec", "strategy", "type")) != "RollingUpdate" {
					t.Errorf("built backend: replicas %v, strategy %v", dig(o.doc, "spec", "replicas"), dig(o.doc, "spec", "strategy"))
				}
				env["BACKEND_DATABASE"] = "postgres://vendorgate:pw@vendorgate-pg-rw:5432/app"
				cfg := loadBackendConfig(t, text, env)
				if len(cfg.RedisURL) != 3 {
					t.Errorf("built backend publishes to %d Redis URLs, want the 3 nodes", len(cfg.RedisURL))
				}
				// The reports folder is on the shared claim.
				onClaim := false
				for _, m := range asList(c.spec["volumeMounts"]) {
					if str(asMap(m)["name"]) == "data" && strings.HasPrefix(cfg.ReportsDir+"/", str(asMap(m)["mountPath"])+"/") {
						onClaim = true
					}
				}
				if !onClaim {
					t.Errorf("built backend reports_dir %s is not on the shared data volume", cfg.ReportsDir)
				}
			case "gateway":
				if cfg := loadGatewayConfig(t, text, env); len(cfg.Redis.URL) != 3 {
					t.Errorf("built gateway limits in %d Redis URLs, want the 3 nodes", len(cfg.Redis.URL))
				}
			}
		}
	}
}
