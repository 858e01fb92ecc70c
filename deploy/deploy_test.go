package deploy

import (
	"encoding/json"
	"fmt"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"vendorgate/config"
)

// Every YAML and JSON file under deploy/ parses; multi-document YAML is
// read to the end.
func TestEveryFileParses(t *testing.T) {
	yamlFiles := files(t, ".yml", ".yaml")
	jsonFiles := files(t, ".json")
	if len(yamlFiles) < 10 || len(jsonFiles) < 1 {
		t.Fatalf("found %d YAML and %d JSON files under deploy/; the layout changed?", len(yamlFiles), len(jsonFiles))
	}
	for _, p := range yamlFiles {
		if len(yamlDocs(t, p)) == 0 {
			t.Errorf("%s: no YAML document", p)
		}
	}
	for _, p := range jsonFiles {
		var v any
		if err := json.Unmarshal(readFile(t, p), &v); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}

// Every metric an alert or a dashboard panel queries is one
// docs/CONTRACTS.md promises, so a typo fails here before any code exists.
func TestMetricNamesAreInTheContract(t *testing.T) {
	contract := contractMetrics(t)
	for _, q := range append(alertQueries(t), dashboardQueries(t)...) {
		for _, name := range metricsInExpr(q.expr) {
			if _, ok := resolveMetric(name, contract); !ok {
				t.Errorf("%s queries %s, which docs/CONTRACTS.md does not name", q.where, name)
			}
		}
	}
}

// Label matchers on vendorgate metrics use the labels docs/CONTRACTS.md
// gives them (plus the target labels job and instance, and le on buckets).
func TestMetricLabelsAreInTheContract(t *testing.T) {
	text := string(readFile(t, filepath.Join(repoRoot, "docs", "CONTRACTS.md")))
	labels := map[string]map[string]bool{}
	for _, m := range regexp.MustCompile(`(vendorgate_[a-z_]*[a-z])(?:\{([a-z_,]+)\})?`).FindAllStringSubmatch(text, -1) {
		if labels[m[1]] == nil {
			labels[m[1]] = map[string]bool{"job": true, "instance": true}
		}
		for _, l := range strings.Split(m[2], ",") {
			if l != "" {
				labels[m[1]][l] = true
			}
		}
	}
	selector := regexp.MustCompile(`(vendorgate_[a-z_]*[a-z])\{([^}]*)\}`)
	matcher := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	known := map[string]string{}
	for name := range labels {
		known[name] = ""
	}
	checked := 0
	for _, q := range append(alertQueries(t), dashboardQueries(t)...) {
		for _, m := range selector.FindAllStringSubmatch(q.expr, -1) {
			base, ok := resolveMetric(m[1], known)
			if !ok {
				continue // TestMetricNamesAreInTheContract reports it
			}
			for _, lm := range matcher.FindAllStringSubmatch(m[2], -1) {
				checked++
				if l := lm[1]; !labels[base][l] && !(l == "le" && base != m[1]) {
					t.Errorf("%s selects %s{%s=...}; the contract gives it labels %v", q.where, m[1], l, keys(labels[base]))
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no label matcher found: the parser is broken")
	}
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Every metric an alert or a dashboard panel queries is exported by the
// gateway's or the backend's code. A name the code does not define yet
// fails here, by name: the alert or panel would silently never fire or show.
func TestMetricNamesAreExportedByTheCode(t *testing.T) {
	exported := exportedMetrics(t)
	missing := map[string][]string{}
	for _, q := range append(alertQueries(t), dashboardQueries(t)...) {
		for _, name := range metricsInExpr(q.expr) {
			if base, ok := resolveMetric(name, exported); !ok {
				missing[base] = append(missing[base], q.where)
			}
		}
	}
	names := make([]string, 0, len(missing))
	for n := range missing {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t.Errorf("metric %s is queried (%s) but no Go source under gateway/ or backend/ defines it",
			n, strings.Join(dedupe(missing[n]), "; "))
	}
}

func dedupe(s []string) []string {
	sort.Strings(s)
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// The scanner itself: literal names, concatenations over a literal list,
// and Namespace/Subsystem/Name options are all found.
func TestMetricScanner(t *testing.T) {
	src := `package x
var a = NewCounter(CounterOpts{Name: "vendorgate_gateway_requests_total"})
func f() {
	for _, name := range []string{"hits", "misses"} {
		_ = "vendorgate_gateway_key_cache_" + name + "_total"
	}
	_ = CounterOpts{Namespace: "vendorgate", Subsystem: "backend", Name: "sweeper_runs_total"}
	_ = "vendorgate_not a metric"
}`
	dir := t.TempDir()
	path := filepath.Join(dir, "x.go")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := parseGo(path)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, n := range metricNamesInFile(f) {
		if metricRef.FindString(n) == n {
			got[n] = true
		}
	}
	for _, want := range []string{"vendorgate_gateway_requests_total", "vendorgate_gateway_key_cache_hits_total",
		"vendorgate_gateway_key_cache_misses_total", "vendorgate_backend_sweeper_runs_total"} {
		if !got[want] {
			t.Errorf("scanner missed %s (found %v)", want, got)
		}
	}
	if got["vendorgate_gateway_key_cache_hits"] {
		t.Error("scanner reported a partial concatenation")
	}
	known := map[string]string{"vendorgate_gateway_request_duration_seconds": ""}
	if base, ok := resolveMetric("vendorgate_gateway_request_duration_seconds_bucket", known); !ok || base != "vendorgate_gateway_request_duration_seconds" {
		t.Errorf("histogram _bucket did not resolve to its base name: %q %v", base, ok)
	}
	if _, ok := resolveMetric("vendorgate_gateway_nope_bucket", known); ok {
		t.Error("an unknown _bucket name resolved")
	}
}

// The alert rules cover what the SREs asked to be paged for, each with a
// severity, a summary, a description and a runbook note.
// TestAlertsTableMatchesTheRules: the alerts table of deploy/README.md
// lists every rule of prometheus/alerts.yml, once, with its severity and
// its for (the duration the table says), and no alert the rules lack.
func TestAlertsTableMatchesTheRules(t *testing.T) {
	text := string(readFile(t, "README.md"))
	_, section, ok := strings.Cut(text, "\n## Alerts\n")
	if !ok {
		t.Fatal("README.md has no ## Alerts section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	type row struct{ severity, fires string }
	table := map[string]row{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if len(cells) != 3 || !strings.HasPrefix(strings.TrimSpace(cells[0]), "Vendorgate") {
			continue
		}
		name := strings.TrimSpace(cells[0])
		if _, dup := table[name]; dup {
			t.Errorf("the table lists %s twice", name)
		}
		table[name] = row{strings.TrimSpace(cells[1]), strings.TrimSpace(cells[2])}
	}
	rules := alertRules(t)
	for _, r := range rules {
		name := str(r["alert"])
		got, ok := table[name]
		if !ok {
			t.Errorf("alert %s is not in the README's alerts table", name)
			continue
		}
		if sev := str(dig(r, "labels", "severity")); got.severity != sev {
			t.Errorf("%s: the table says %s, the rule %s", name, got.severity, sev)
		}
		if f := str(r["for"]); f != "" && !strings.Contains(got.fires, f) {
			t.Errorf("%s: the table says it fires when %q; the rule waits %s", name, got.fires, f)
		}
		delete(table, name)
	}
	for name := range table {
		t.Errorf("the README's alerts table lists %s, which alerts.yml does not define", name)
	}
	if len(rules) == 0 {
		t.Fatal("no rules")
	}
}

func TestAlertRules(t *testing.T) {
	rules := alertRules(t)
	seen := map[string]bool{}
	for _, r := range rules {
		name := str(r["alert"])
		if name == "" {
			t.Errorf("rule without an alert name: %v", r)
			continue
		}
		if seen[name] {
			t.Errorf("alert %s defined twice", name)
		}
		seen[name] = true
		switch sev := str(dig(r, "labels", "severity")); sev {
		case "critical", "warning", "info":
		default:
			t.Errorf("%s: severity %q, want critical, warning or info", name, sev)
		}
		for _, a := range []string{"summary", "description", "runbook"} {
			if strings.TrimSpace(str(dig(r, "annotations", a))) == "" {
				t.Errorf("%s: no %s annotation", name, a)
			}
		}
	}
	required := []struct {
		what  string
		match []string // every substring must be in one rule's expression
		for_  string   // minimum `for`, empty for none
	}{
		{"Redis limiter unavailable", []string{"vendorgate_gateway_limiter_decisions_total", `outcome="unavailable"`, "> 0"}, "1m"},
		{"breaker open", []string{"vendorgate_gateway_breaker_state", "== 2"}, "1m"},
		{"5xx ratio", []string{"vendorgate_gateway_requests_total", `status=~"5.."`, "/"}, "1m"},
		{"p99 latency", []string{"histogram_quantile(0.99", "vendorgate_gateway_request_duration_seconds_bucket"}, "1m"},
		{"failed-auth spike", []string{"vendorgate_gateway_auth_failures_total"}, "1m"},
		{"backend sweeper stalled", []string{"vendorgate_backend_sweeper_runs_total"}, "1m"},
		{"backend down", []string{`up{job="vendorgate-backend"}`, "== 0"}, "1m"},
	}
	for _, req := range required {
		found := false
		for _, r := range rules {
			expr := strings.Join(strings.Fields(str(r["expr"])), " ")
			ok := true
			for _, m := range req.match {
				ok = ok && strings.Contains(expr, m)
			}
			if !ok {
				continue
			}
			found = true
			if req.for_ != "" {
				got, err := time.ParseDuration(str(r["for"]))
				want, _ := time.ParseDuration(req.for_)
				if err != nil || got < want {
					t.Errorf("%s (%s): for %q, want at least %s", str(r["alert"]), req.what, str(r["for"]), req.for_)
				}
			}
		}
		if !found {
			t.Errorf("no alert for %s (an expression containing %q)", req.what, req.match)
		}
	}
}

// The job labels the alerts select on are the jobs Prometheus scrapes, in
// the compose and the Kubernetes configurations alike.
func TestAlertJobsAreScraped(t *testing.T) {
	jobRef := regexp.MustCompile(`job="([^"]+)"`)
	var used []string
	for _, q := range alertQueries(t) {
		for _, m := range jobRef.FindAllStringSubmatch(q.expr, -1) {
			used = append(used, m[1])
		}
	}
	if len(used) == 0 {
		t.Fatal("no alert selects a job: the up == 0 alerts are gone?")
	}
	for _, path := range []string{"prometheus/prometheus.yml", "prometheus/prometheus-kubernetes.yml"} {
		cfg := yamlDoc(t, path)
		jobs := map[string]bool{}
		for _, sc := range asList(cfg["scrape_configs"]) {
			jobs[str(asMap(sc)["job_name"])] = true
		}
		for _, j := range used {
			if !jobs[j] {
				t.Errorf("%s: alerts select job %q, which it does not scrape", path, j)
			}
		}
		files := asList(cfg["rule_files"])
		if len(files) != 1 || str(files[0]) != "alerts.yml" {
			t.Errorf("%s: rule_files = %v, want [alerts.yml] (relative to the config file)", path, files)
		}
	}
}

// The dashboard shows what was asked for, every panel and variable reads
// the datasource chosen in its datasource variable (a Prometheus one; the
// provisioned datasource by default, so the compose stack opens on it, and
// any other Grafana picks its own), and Grafana finds it where compose
// mounts it.
func TestDashboard(t *testing.T) {
	dash := jsonDoc(t, "grafana/dashboards/vendorgate.json")
	ds := yamlDoc(t, "grafana/provisioning/datasources/prometheus.yml")
	provisioned := str(dig(asList(ds["datasources"])[0], "uid"))
	if provisioned == "" {
		t.Fatal("the provisioned datasource has no uid for the dashboard to default to")
	}
	const uid = "${datasource}"
	var dsVar map[string]any
	for _, v := range asList(dig(dash, "templating", "list")) {
		v := asMap(v)
		if str(v["type"]) == "datasource" {
			dsVar = v
			continue
		}
		if got := str(dig(v, "datasource", "uid")); got != uid {
			t.Errorf("variable %q reads datasource %q, want %q", str(v["name"]), got, uid)
		}
	}
	if dsVar == nil || str(dsVar["name"]) != "datasource" || str(dsVar["query"]) != "prometheus" || str(dig(dsVar, "current", "value")) != provisioned {
		t.Errorf("no datasource variable named datasource, of Prometheus datasources, defaulting to the provisioned %q: %v", provisioned, dsVar)
	}
	ids := map[string]bool{}
	var exprs []string
	for _, p := range asList(dash["panels"]) {
		p := asMap(p)
		id := str(p["id"])
		if ids[id] {
			t.Errorf("panel id %s used twice", id)
		}
		ids[id] = true
		if dig(p, "gridPos", "w") == nil {
			t.Errorf("panel %q has no gridPos", str(p["title"]))
		}
		if str(p["type"]) == "row" {
			continue
		}
		if got := str(dig(p, "datasource", "uid")); got != uid {
			t.Errorf("panel %q reads datasource %q, want %q", str(p["title"]), got, uid)
		}
		for _, tg := range asList(p["targets"]) {
			if got := str(dig(tg, "datasource", "uid")); got != uid {
				t.Errorf("panel %q target reads datasource %q, want %q", str(p["title"]), got, uid)
			}
			exprs = append(exprs, str(asMap(tg)["expr"]))
		}
	}
	all := strings.Join(exprs, "\n")
	for _, want := range []string{
		"vendorgate_gateway_requests_total", `status=~"5.."`, "histogram_quantile(0.5,", "histogram_quantile(0.99,",
		"vendorgate_gateway_request_duration_seconds_bucket", "vendorgate_gateway_limiter_decisions_total",
		"vendorgate_gateway_redis_call_duration_seconds_bucket", "vendorgate_gateway_redis_errors_total",
		"vendorgate_gateway_breaker_state", "vendorgate_gateway_key_cache_hits_total", "vendorgate_gateway_key_cache_misses_total",
		"vendorgate_gateway_auth_failures_total", "vendorgate_backend_orders", "vendorgate_backend_sweeper_runs_total",
		// the gateway's resources (its go_* and process_* metrics)
		`process_cpu_seconds_total{instance=~"$gateway"}`, `process_resident_memory_bytes{instance=~"$gateway"}`,
		`go_goroutines{instance=~"$gateway"}`, `go_gc_duration_seconds_sum{instance=~"$gateway"}`,
	} {
		if !strings.Contains(all, want) {
			t.Errorf("no dashboard panel queries %s", want)
		}
	}
	for _, want := range []string{"by (status)", "by (outcome)", "by (instance, breaker)", "by (reason)", "by (limit)"} {
		if !strings.Contains(all, want) {
			t.Errorf("no dashboard panel breaks a series down %s", want)
		}
	}

	provider := asMap(asList(yamlDoc(t, "grafana/provisioning/dashboards/vendorgate.yml")["providers"])[0])
	path := str(dig(provider, "options", "path"))
	grafana := asMap(dig(yamlDoc(t, "docker-compose.yml"), "services", "grafana"))
	mounts := map[string]string{}
	for _, v := range asList(grafana["volumes"]) {
		parts := strings.Split(str(v), ":")
		if len(parts) >= 2 {
			mounts[parts[1]] = parts[0]
		}
	}
	if mounts[path] != "./grafana/dashboards" {
		t.Errorf("the dashboard provider reads %q, but compose mounts ./grafana/dashboards at another path (%v)", path, mounts)
	}
	if mounts["/etc/grafana/provisioning"] != "./grafana/provisioning" {
		t.Errorf("compose does not mount ./grafana/provisioning at /etc/grafana/provisioning (%v)", mounts)
	}
	if target := str(dig(asList(ds["datasources"])[0], "url")); target != "http://prometheus:9090" {
		t.Errorf("datasource url %q, want the compose prometheus service http://prometheus:9090", target)
	}
}

// promtool checks the rules, the configurations, the alert unit tests and
// every dashboard expression, when it is installed (Debian: apt-get install
// prometheus).
func TestPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not on PATH (Debian package: prometheus)")
	}
	run := func(t *testing.T, dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	t.Run("check rules", func(t *testing.T) { run(t, "prometheus", "check", "rules", "alerts.yml") })
	t.Run("check config", func(t *testing.T) { run(t, "prometheus", "check", "config", "prometheus.yml") })
	t.Run("check kubernetes config", func(t *testing.T) {
		cmd := exec.Command(promtool, "check", "config", "prometheus-kubernetes.yml")
		cmd.Dir = "prometheus"
		out, err := cmd.CombinedOutput()
		if err != nil && strings.Contains(string(out), "field kubernetes_sd_configs not found") {
			t.Skip("this promtool is built without Kubernetes service discovery (Debian's is)")
		}
		if err != nil {
			t.Fatalf("promtool check config prometheus-kubernetes.yml: %v\n%s", err, out)
		}
	})
	t.Run("alert unit tests", func(t *testing.T) {
		// The cases in alerts.gotest.yml compare labels only: run them
		// against a copy of the rules without annotations.
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "alerts.yml"), withoutAnnotations(t, "prometheus/alerts.yml"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "alerts.gotest.yml"), readFile(t, "prometheus/alerts.gotest.yml"), 0o600); err != nil {
			t.Fatal(err)
		}
		run(t, dir, "test", "rules", "alerts.gotest.yml")
	})
	t.Run("every alert has a unit test", func(t *testing.T) {
		tested := map[string]bool{}
		for _, tc := range asList(yamlDoc(t, "prometheus/alerts.gotest.yml")["tests"]) {
			for _, a := range asList(asMap(tc)["alert_rule_test"]) {
				if len(asList(asMap(a)["exp_alerts"])) > 0 {
					tested[str(asMap(a)["alertname"])] = true
				}
			}
		}
		for _, r := range alertRules(t) {
			if !tested[str(r["alert"])] {
				t.Errorf("alert %s has no unit test in alerts.gotest.yml that expects it to fire", str(r["alert"]))
			}
		}
	})
	t.Run("dashboard expressions", func(t *testing.T) {
		// Grafana's variables replaced by what they expand to, each
		// expression checked as a recording rule.
		vars := strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h", "$gateway", ".*")
		var rules []map[string]string
		for i, q := range dashboardQueries(t) {
			if strings.HasPrefix(q.expr, "label_values(") {
				continue // a Grafana function, not PromQL
			}
			rules = append(rules, map[string]string{"record": fmt.Sprintf("dashboard:query_%d", i), "expr": vars.Replace(q.expr)})
		}
		out, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "dashboard.yml"), out, 0o600); err != nil {
			t.Fatal(err)
		}
		run(t, dir, "check", "rules", "dashboard.yml")
	})
}

// Every environment variable set for a vendorgate binary, anywhere under
// deploy/, is one the config package reads.
func TestEnvironmentNamesAreSettings(t *testing.T) {
	known := configEnvNames(t)
	check := func(where string, names []string) {
		t.Helper()
		if len(names) == 0 {
			t.Errorf("%s: found no environment variables (parser broken?)", where)
		}
		for _, n := range names {
			if !known[n] && !runtimeEnv[n] {
				t.Errorf("%s sets %s, which is not a setting in config/*.go", where, n)
			}
		}
	}

	for name, svc := range asMap(yamlDoc(t, "docker-compose.yml")["services"]) {
		svc := asMap(svc)
		if binary(str(svc["image"])) == "" {
			continue
		}
		var names []string
		for k := range composeEnv(svc) {
			names = append(names, k)
		}
		check("docker-compose.yml service "+name, names)
	}

	for _, c := range k8sContainers(t) {
		if binary(c.image) == "" {
			continue
		}
		var names []string
		for _, e := range asList(c.spec["env"]) {
			names = append(names, str(asMap(e)["name"]))
		}
		check("k8s "+c.where, names)
	}

	for _, bin := range []string{"gateway", "backend"} {
		u := parseUnit(t, "systemd/vendorgate-"+bin+".service")
		var names []string
		for _, v := range u["Service"]["Environment"] {
			for _, kv := range strings.Fields(v) {
				k, _, _ := strings.Cut(strings.Trim(kv, `"`), "=")
				names = append(names, k)
			}
		}
		if bin == "backend" {
			check("systemd/vendorgate-backend.service", names)
		}
		var fileNames []string
		for k := range envFileNames(t, "systemd/"+bin+".env.example") {
			fileNames = append(fileNames, k)
		}
		check("systemd/"+bin+".env.example", fileNames)
	}

	for _, p := range files(t, ".Dockerfile") {
		var names []string
		for _, in := range dockerInstructions(t, p) {
			if in.cmd == "ENV" {
				for k := range dockerEnv(in.args) {
					names = append(names, k)
				}
			}
		}
		if strings.Contains(p, "vendorctl") {
			continue // sets none
		}
		check(p, names)
	}
}

// The tokens are required in compose (${VAR:?}), the gateway and the
// backend share one internal token, and every variable compose
// interpolates is documented in .env.example.
func TestComposeSecretsAndVariables(t *testing.T) {
	raw := string(readFile(t, "docker-compose.yml"))
	services := asMap(yamlDoc(t, "docker-compose.yml")["services"])
	required := regexp.MustCompile(`^\$\{([A-Z0-9_]+):\?[^}]+\}$`)
	tokenVar := func(svc, key string) string {
		v := str(composeRawEnv(asMap(services[svc]))[key])
		m := required.FindStringSubmatch(v)
		if m == nil {
			t.Errorf("%s %s = %q: want ${VAR:?message} so compose refuses to start without it", svc, key, v)
			return ""
		}
		return m[1]
	}
	gw1 := tokenVar("gateway-1", "GATEWAY_INTERNAL_TOKEN")
	gw2 := tokenVar("gateway-2", "GATEWAY_INTERNAL_TOKEN")
	be := tokenVar("backend", "BACKEND_INTERNAL_TOKEN")
	tokenVar("backend", "BACKEND_ADMIN_TOKEN")
	if gw1 != be || gw2 != be {
		t.Errorf("gateway internal tokens (%s, %s) and the backend's (%s) come from different variables", gw1, gw2, be)
	}
	sg1 := tokenVar("gateway-1", "GATEWAY_KEY_SIGNING_SECRETS")
	sg2 := tokenVar("gateway-2", "GATEWAY_KEY_SIGNING_SECRETS")
	sb := tokenVar("backend", "BACKEND_KEY_SIGNING_SECRETS")
	if sg1 != sb || sg2 != sb || sb == be {
		t.Errorf("key-signing secrets: gateways %s, %s, backend %s: want one variable of their own (internal token %s)", sg1, sg2, sb, be)
	}
	documented := envFileNames(t, ".env.example")
	for _, m := range interp.FindAllStringSubmatch(raw, -1) {
		if _, ok := documented[m[1]]; !ok {
			t.Errorf("docker-compose.yml uses ${%s}, which .env.example does not list", m[1])
		}
	}
	if !strings.Contains(string(readFile(t, ".gitignore")), ".env") {
		t.Error("deploy/.gitignore does not keep .env (the tokens) out of git")
	}
}

// The compose stack: the services asked for, listeners reachable inside the
// network, exposed ports that are the ports the binaries listen on, every
// address that points at a service pointing at the right port, grace
// periods above shutdown_grace, and host paths that exist.
func TestComposeStack(t *testing.T) {
	doc := yamlDoc(t, "docker-compose.yml")
	services := asMap(doc["services"])
	for _, s := range []string{"redis", "backend", "gateway-1", "gateway-2", "lb", "prometheus", "grafana", "vendorctl"} {
		if services[s] == nil {
			t.Errorf("no %s service", s)
		}
	}
	if img := str(dig(services, "redis", "image")); img != "redis:7" {
		t.Errorf("redis image %q, want redis:7", img)
	}

	// Each vendorgate service's effective listeners, from the config file
	// it mounts and its environment, loaded by the config package.
	type svcPorts struct{ listen, admin int }
	ports := map[string]svcPorts{}
	for name, svc := range services {
		svc := asMap(svc)
		bin := binary(str(svc["image"]))
		if bin == "" || bin == "vendorctl" {
			continue
		}
		var fileText []byte
		if cfgPath := flagValue(asList(svc["command"]), "-config"); cfgPath != "" {
			host := composeMountSource(svc, cfgPath)
			if host == "" {
				t.Errorf("%s: -config %s is not a mounted file", name, cfgPath)
				continue
			}
			fileText = readFile(t, host)
		}
		eff := loadConfig(t, bin, fileText, composeEnv(svc))
		for _, addr := range []string{eff.listen, eff.admin} {
			if !reachable(t, addr) {
				t.Errorf("%s listens on %s: unreachable from the other containers", name, addr)
			}
		}
		p := svcPorts{portOf(t, eff.listen), portOf(t, eff.admin)}
		ports[name] = p
		if hostname := str(svc["hostname"]); hostname != "" {
			ports[hostname] = p
		}
		for _, e := range asList(svc["expose"]) {
			if n, _ := strconv.Atoi(str(e)); n != p.listen && n != p.admin {
				t.Errorf("%s exposes %s; it listens on %d and %d", name, str(e), p.listen, p.admin)
			}
		}
		for _, pub := range asList(svc["ports"]) {
			parts := strings.Split(interpolate(str(pub)), ":")
			if n, _ := strconv.Atoi(parts[len(parts)-1]); n != p.listen && n != p.admin {
				t.Errorf("%s publishes %s; it listens on %d and %d", name, str(pub), p.listen, p.admin)
			}
		}
		if d, err := time.ParseDuration(str(svc["stop_grace_period"])); err != nil || d.Seconds() <= eff.grace {
			t.Errorf("%s: stop_grace_period %q must exceed shutdown_grace (%vs)", name, str(svc["stop_grace_period"]), eff.grace)
		}
		if str(svc["read_only"]) != "true" {
			t.Errorf("%s: read_only is not true", name)
		}
	}
	if ports["gateway-1"].admin == 0 || ports["backend"].admin == 0 {
		t.Fatalf("could not work out the listeners of gateway-1 and backend: %v", ports)
	}

	// Addresses the gateways and the backend are given.
	for _, gw := range []string{"gateway-1", "gateway-2"} {
		env := composeEnv(asMap(services[gw]))
		if got, want := env["GATEWAY_BACKEND_URL"], fmt.Sprintf("http://backend:%d", ports["backend"].listen); got != want {
			t.Errorf("%s GATEWAY_BACKEND_URL = %q, want %q (the backend's main listener)", gw, got, want)
		}
		if got := env["GATEWAY_REDIS_URL"]; got != "redis://redis:6379/0" {
			t.Errorf("%s GATEWAY_REDIS_URL = %q", gw, got)
		}
		if got := env["GATEWAY_ADMIN_LISTEN"]; got != "0.0.0.0:9090" {
			t.Errorf("%s GATEWAY_ADMIN_LISTEN = %q, want 0.0.0.0:9090", gw, got)
		}
	}
	benv := composeEnv(asMap(services["backend"]))
	for k, want := range map[string]string{"BACKEND_REDIS_URL": "redis://redis:6379/0", "BACKEND_LISTEN": "0.0.0.0:8081", "BACKEND_ADMIN_LISTEN": "0.0.0.0:8082"} {
		if benv[k] != want {
			t.Errorf("backend %s = %q, want %q", k, benv[k], want)
		}
	}
	venv := composeEnv(asMap(services["vendorctl"]))
	if got, want := venv["VENDORCTL_ADMIN_URL"], fmt.Sprintf("http://backend:%d", ports["backend"].admin); got != want {
		t.Errorf("vendorctl VENDORCTL_ADMIN_URL = %q, want %q (the backend's admin listener)", got, want)
	}
	if str(composeRawEnv(asMap(services["vendorctl"]))["VENDORCTL_ADMIN_TOKEN"]) != str(composeRawEnv(asMap(services["backend"]))["BACKEND_ADMIN_TOKEN"]) {
		t.Error("vendorctl's VENDORCTL_ADMIN_TOKEN and the backend's BACKEND_ADMIN_TOKEN come from different variables")
	}
	// The SQLite file lives on a named volume.
	dbDir := filepath.Dir(benv["BACKEND_DATABASE"])
	volumes := asMap(doc["volumes"])
	onVolume := false
	for _, v := range asList(dig(services, "backend", "volumes")) {
		parts := strings.Split(str(v), ":")
		if _, named := volumes[parts[0]]; named && len(parts) >= 2 && (parts[1] == dbDir || strings.HasPrefix(dbDir, parts[1]+"/")) {
			onVolume = true
		}
	}
	if !onVolume {
		t.Errorf("backend database %q is not on a named volume", benv["BACKEND_DATABASE"])
	}

	// Prometheus scrapes the admin listeners.
	prom := yamlDoc(t, "prometheus/prometheus.yml")
	scraped := map[string]bool{}
	for _, sc := range asList(prom["scrape_configs"]) {
		sc := asMap(sc)
		if !strings.HasPrefix(str(sc["job_name"]), "vendorgate-") {
			continue
		}
		if p := str(sc["metrics_path"]); p != "" && p != "/metrics" {
			t.Errorf("job %s scrapes %s, want /metrics", str(sc["job_name"]), p)
		}
		for _, st := range asList(sc["static_configs"]) {
			for _, target := range asList(asMap(st)["targets"]) {
				host, port, _ := strings.Cut(str(target), ":")
				p, ok := ports[host]
				if !ok {
					t.Errorf("prometheus target %s is not a vendorgate service", str(target))
					continue
				}
				if n, _ := strconv.Atoi(port); n != p.admin {
					t.Errorf("prometheus target %s: %s serves /metrics on its admin port %d", str(target), host, p.admin)
				}
				scraped[host] = true
			}
		}
	}
	for _, s := range []string{"gateway-1", "gateway-2", "backend"} {
		if !scraped[s] {
			t.Errorf("prometheus does not scrape %s", s)
		}
	}

	// The load balancer sends traffic to the public port and checks
	// /readyz on the admin port.
	hap := string(readFile(t, "haproxy/haproxy.cfg"))
	check := regexp.MustCompile(`(?m)^\s*default-server\b.*\bcheck port (\d+)`)
	if m := check.FindStringSubmatch(hap); m == nil || m[1] != strconv.Itoa(ports["gateway-1"].admin) {
		t.Errorf("haproxy does not health-check the gateways' admin port %d (default-server ... check port N)", ports["gateway-1"].admin)
	}
	if !regexp.MustCompile(`(?m)^\s*http-check send meth GET uri ` + regexp.QuoteMeta(LBReadyzPath) + `\s*$`).MatchString(hap) {
		t.Errorf("haproxy does not health-check GET %s", LBReadyzPath)
	}
	servers := regexp.MustCompile(`(?m)^\s*server (\S+) (\S+):(\d+)`).FindAllStringSubmatch(hap, -1)
	if len(servers) != 2 {
		t.Errorf("haproxy has %d servers, want gateway-1 and gateway-2", len(servers))
	}
	for _, s := range servers {
		p, ok := ports[s[2]]
		if !ok {
			t.Errorf("haproxy server %s points at %s, not a gateway service", s[1], s[2])
			continue
		}
		if n, _ := strconv.Atoi(s[3]); n != p.listen {
			t.Errorf("haproxy server %s: port %s, the gateway listens on %d", s[1], s[3], p.listen)
		}
	}
	lb := asMap(services["lb"])
	bind := regexp.MustCompile(`(?m)^\s*bind :(\d+)\s*$`).FindStringSubmatch(hap)
	published := ""
	for _, pub := range asList(lb["ports"]) {
		parts := strings.Split(str(pub), ":")
		published = parts[len(parts)-1]
	}
	if bind == nil || bind[1] != published {
		t.Errorf("lb publishes container port %q but haproxy binds %v", published, bind)
	}
	trusted := composeEnv(asMap(services["gateway-1"]))["GATEWAY_TRUSTED_PROXIES"]
	lbAddr := str(dig(lb, "networks", "vendorgate", "ipv4_address"))
	if lbAddr == "" || trusted != lbAddr {
		t.Errorf("gateways trust X-Forwarded-For from %q, the load balancer is at %q", trusted, lbAddr)
	}

	// Host paths mounted or built from exist.
	for name, svc := range services {
		svc := asMap(svc)
		for _, v := range asList(svc["volumes"]) {
			src := strings.Split(str(v), ":")[0]
			if strings.HasPrefix(src, ".") {
				if _, err := os.Stat(src); err != nil {
					t.Errorf("%s mounts %s, which does not exist", name, src)
				}
			}
		}
		if b := asMap(svc["build"]); b != nil {
			if _, err := os.Stat(filepath.Join(str(b["context"]), str(b["dockerfile"]))); err != nil {
				t.Errorf("%s builds from %s/%s, which does not exist", name, str(b["context"]), str(b["dockerfile"]))
			}
		}
	}
}

// composeRawEnv is a service's environment as written (map or list form).
func composeRawEnv(svc map[string]any) map[string]any {
	out := map[string]any{}
	switch env := svc["environment"].(type) {
	case map[string]any:
		for k, v := range env {
			out[k] = v
		}
	case []any:
		for _, kv := range env {
			k, v, _ := strings.Cut(str(kv), "=")
			out[k] = v
		}
	}
	return out
}

// composeEnv is a service's environment as the container sees it.
func composeEnv(svc map[string]any) map[string]string {
	out := map[string]string{}
	for k, v := range composeRawEnv(svc) {
		out[k] = interpolate(str(v))
	}
	return out
}

// composeMountSource is the host path mounted at the container path target.
func composeMountSource(svc map[string]any, target string) string {
	for _, v := range asList(svc["volumes"]) {
		parts := strings.Split(str(v), ":")
		if len(parts) >= 2 && parts[1] == target {
			return parts[0]
		}
	}
	return ""
}

// flagValue returns the argument after flag in args.
func flagValue(args []any, flag string) string {
	for i := 0; i+1 < len(args); i++ {
		if str(args[i]) == flag {
			return str(args[i+1])
		}
	}
	return ""
}

// The HAProxy configuration is valid, when haproxy is installed.
func TestHAProxyConfig(t *testing.T) {
	haproxy, err := exec.LookPath("haproxy")
	if err != nil {
		t.Skip("haproxy not on PATH")
	}
	out, err := exec.Command(haproxy, "-c", "-f", "haproxy/haproxy.cfg").CombinedOutput()
	if err != nil {
		t.Fatalf("haproxy -c: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		// Service names resolve only inside the compose network.
		if strings.Contains(line, "[WARNING]") && !strings.Contains(line, "could not resolve address") {
			t.Errorf("haproxy -c: %s", line)
		}
	}
}

// TestHAProxyTimeoutsAboveTheGateways: HAProxy's server timeout (its idle
// bound on the gateway's side, a download under way included) is above
// the gateway's proxy.timeout and proxy.stream_idle_timeout in the file
// the compose stack mounts, so that the gateway answers a slow backend
// with its own 504 and cuts a stalled report download itself, and HAProxy
// never cuts either first.
func TestHAProxyTimeoutsAboveTheGateways(t *testing.T) {
	var server time.Duration
	for _, line := range strings.Split(string(readFile(t, "haproxy/haproxy.cfg")), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "timeout" && f[1] == "server" {
			d, err := time.ParseDuration(f[2])
			if err != nil {
				t.Fatalf("timeout server %s: %v", f[2], err)
			}
			server = d
		}
	}
	if server == 0 {
		t.Fatal("haproxy.cfg sets no timeout server")
	}
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := writeFile(path, string(readFile(t, "config/gateway.yaml"))); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"GATEWAY_INTERNAL_TOKEN": dummyToken, "GATEWAY_KEY_SIGNING_SECRETS": dummySigning}
	cfg, err := config.LoadGateway(path, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	for name, d := range map[string]time.Duration{"proxy.timeout": cfg.Proxy.Timeout, "proxy.stream_idle_timeout": cfg.Proxy.StreamIdleTimeout} {
		if server <= d {
			t.Errorf("haproxy timeout server %v is not above the gateway's %s (%v)", server, name, d)
		}
	}
}

// dockerEnv parses an ENV instruction's KEY=value pairs.
func dockerEnv(args string) map[string]string {
	out := map[string]string{}
	for _, kv := range strings.Fields(args) {
		if k, v, ok := strings.Cut(kv, "="); ok {
			out[k] = strings.Trim(v, `"`)
		}
	}
	return out
}

// Each Dockerfile builds a static binary in a golang:1.26 stage and runs it
// from a distroless (or scratch) image as a non-root user, exposing the
// ports the binary listens on with the image's environment.
func TestDockerfiles(t *testing.T) {
	paths := files(t, ".Dockerfile")
	if len(paths) != 3 {
		t.Fatalf("found %v, want gateway, backend and vendorctl Dockerfiles", paths)
	}
	for _, p := range paths {
		bin := strings.TrimSuffix(filepath.Base(p), ".Dockerfile")
		t.Run(bin, func(t *testing.T) {
			ins := dockerInstructions(t, p)
			var froms []string
			stages := map[string]bool{}
			final := -1
			for i, in := range ins {
				if in.cmd == "FROM" {
					f := strings.Fields(in.args)
					var image string
					for j := 0; j < len(f); j++ {
						if strings.HasPrefix(f[j], "--") {
							continue
						}
						image = f[j]
						if j+2 < len(f) && strings.EqualFold(f[j+1], "AS") {
							stages[f[j+2]] = true
						}
						break
					}
					froms = append(froms, image)
					final = i
				}
				if in.cmd == "COPY" && strings.Contains(in.args, "--from=") {
					from := regexp.MustCompile(`--from=(\S+)`).FindStringSubmatch(in.args)[1]
					if !stages[from] {
						t.Errorf("COPY --from=%s: no earlier stage of that name", from)
					}
				}
			}
			if len(froms) < 2 {
				t.Fatalf("FROM %v: want a multi-stage build", froms)
			}
			if froms[0] != "golang:1.26" {
				t.Errorf("build stage FROM %s, want golang:1.26", froms[0])
			}
			last := froms[len(froms)-1]
			if !strings.HasPrefix(last, "gcr.io/distroless/static") && last != "scratch" {
				t.Errorf("final stage FROM %s, want distroless static or scratch", last)
			}

			var build string
			for _, in := range ins[:final] {
				if in.cmd == "RUN" && strings.Contains(in.args, "go build") {
					build = in.args
				}
			}
			for _, want := range []string{"CGO_ENABLED=0", "-trimpath", `-ldflags="-s -w"`, "-o /out/" + bin, "./cmd/" + bin} {
				if !strings.Contains(build, want) {
					t.Errorf("go build step lacks %s: %q", want, build)
				}
			}

			user, entry := "", ""
			env := map[string]string{}
			var exposed []int
			for _, in := range ins[final:] {
				switch in.cmd {
				case "USER":
					user = in.args
				case "ENTRYPOINT":
					entry = in.args
				case "ENV":
					for k, v := range dockerEnv(in.args) {
						env[k] = v
					}
				case "EXPOSE":
					for _, f := range strings.Fields(in.args) {
						n, err := strconv.Atoi(strings.TrimSuffix(f, "/tcp"))
						if err != nil {
							t.Errorf("EXPOSE %s", f)
						}
						exposed = append(exposed, n)
					}
				}
			}
			uid, _, _ := strings.Cut(user, ":")
			nonRootImage := strings.HasSuffix(last, ":nonroot")
			if uid == "0" || uid == "root" || (uid == "" && !nonRootImage) {
				t.Errorf("final stage runs as %q; want a non-root user (65532)", user)
			}
			var argv []string
			if err := json.Unmarshal([]byte(entry), &argv); err != nil || len(argv) == 0 || filepath.Base(argv[0]) != bin {
				t.Errorf("ENTRYPOINT %s: want the exec form running %s (no shell in the image)", entry, bin)
			}
			if _, err := os.Stat(p + ".dockerignore"); err != nil {
				t.Errorf("no %s.dockerignore: the whole repository (bin/, var/, .git) would be sent as context", p)
			}
			if bin == "vendorctl" {
				if len(exposed) != 0 {
					t.Errorf("vendorctl exposes %v; it listens on nothing", exposed)
				}
				return
			}
			env[map[string]string{"gateway": "GATEWAY_INTERNAL_TOKEN", "backend": "BACKEND_INTERNAL_TOKEN"}[bin]] = dummyToken
			env["BACKEND_ADMIN_TOKEN"] = dummyToken
			env[strings.ToUpper(bin)+"_KEY_SIGNING_SECRETS"] = dummySigning
			eff := loadConfig(t, bin, nil, env)
			want := []int{portOf(t, eff.listen), portOf(t, eff.admin)}
			sort.Ints(exposed)
			sort.Ints(want)
			if fmt.Sprint(exposed) != fmt.Sprint(want) {
				t.Errorf("EXPOSE %v, but with the image's environment it listens on %v", exposed, want)
			}
			for _, addr := range []string{eff.listen, eff.admin} {
				if !reachable(t, addr) {
					t.Errorf("with the image's environment it listens on %s: unreachable from outside the container", addr)
				}
			}
		})
	}
}

// TestMakeTestAlertsRunsThePromtoolCases: `make test-alerts`, the command
// the docs give an SRE for the alert unit tests, selects TestPromtool's
// subtests that check the rules and run the unit tests, by the names they
// have (a renamed subtest would leave the target running nothing).
func TestMakeTestAlertsRunsThePromtoolCases(t *testing.T) {
	mk := string(readFile(t, filepath.Join(repoRoot, "Makefile")))
	_, recipe, ok := strings.Cut(mk, "\ntest-alerts:\n\t")
	if !ok {
		t.Fatal("the Makefile has no test-alerts target")
	}
	recipe, _, _ = strings.Cut(recipe, "\n")
	src := string(readFile(t, "deploy_test.go"))
	for _, sub := range []string{"check rules", "alert unit tests", "every alert has a unit test"} {
		if !strings.Contains(src, `t.Run("`+sub+`"`) || !strings.Contains(recipe, strings.ReplaceAll(sub, " ", "_")) {
			t.Errorf("make test-alerts (%s) does not run TestPromtool/%s", recipe, sub)
		}
	}
	if !strings.Contains(recipe, "TestPromtool/") || !strings.Contains(recipe, "./deploy") {
		t.Errorf("make test-alerts does not run deploy's TestPromtool: %s", recipe)
	}
}

// TestAlertJobsAreNamed: every job an alert selects is a job_name of each
// shipped Prometheus configuration that scrapes vendorgate, and
// docs/operating.md names it, so an SRE with a Prometheus of their own
// knows which job names the rules expect.
func TestAlertJobsAreNamed(t *testing.T) {
	ops := string(readFile(t, filepath.Join(repoRoot, "docs", "operating.md")))
	jobs := map[string]bool{}
	for _, q := range alertQueries(t) {
		for _, m := range regexp.MustCompile(`job="([^"]+)"`).FindAllStringSubmatch(q.expr, -1) {
			jobs[m[1]] = true
		}
	}
	if len(jobs) == 0 {
		t.Fatal("no alert selects a job: the parser is broken")
	}
	for _, f := range []string{"prometheus.yml", "prometheus-scale-out.yml", "prometheus-kubernetes.yml"} {
		conf := string(readFile(t, filepath.Join("prometheus", f)))
		for job := range jobs {
			if !strings.Contains(conf, "job_name: "+job+"\n") {
				t.Errorf("prometheus/%s has no job %s, which the alerts select", f, job)
			}
		}
	}
	for job := range jobs {
		if !strings.Contains(ops, "`job=\""+job+"\"`") {
			t.Errorf("docs/operating.md does not name the job %s the alerts select", job)
		}
	}
}

// TestLimiterDashboard: the limiter's own dashboard, beside the overview,
// reads its datasource from a datasource variable and shows the limiter's
// decisions by policy and outcome, its leases, Redis's verdicts (errors by
// kind, breaker trips), the concurrency slots held, the buckets charged
// and the quotas used (a quota variable picks the quota rows); every
// panel and target reads ${datasource}. (Its queries are
// in dashboardQueries, so the metric-contract tests cover it.)
func TestLimiterDashboard(t *testing.T) {
	dash := jsonDoc(t, "grafana/dashboards/vendorgate-limiter.json")
	var dsVar, quotaVar bool
	for _, v := range asList(dig(dash, "templating", "list")) {
		v := asMap(v)
		if str(v["type"]) == "datasource" && str(v["name"]) == "datasource" && str(v["query"]) == "prometheus" {
			dsVar = true
		}
		if str(v["name"]) == "quota" && strings.Contains(str(v["definition"]), "label_values(vendorgate_gateway_limiter_decisions_total, limit)") {
			quotaVar = true
		}
	}
	if !dsVar {
		t.Error("no datasource variable of Prometheus datasources")
	}
	if !quotaVar {
		t.Error("no quota variable of the decisions' limit rows")
	}
	var exprs []string
	for _, p := range asList(dash["panels"]) {
		p := asMap(p)
		if str(p["type"]) == "row" {
			continue
		}
		if got := str(dig(p, "datasource", "uid")); got != "${datasource}" {
			t.Errorf("panel %q reads datasource %q", str(p["title"]), got)
		}
		for _, tg := range asList(p["targets"]) {
			if got := str(dig(tg, "datasource", "uid")); got != "${datasource}" {
				t.Errorf("panel %q target reads datasource %q", str(p["title"]), got)
			}
			exprs = append(exprs, str(asMap(tg)["expr"]))
		}
	}
	all := strings.Join(exprs, "\n")
	for _, want := range []string{
		"vendorgate_gateway_limiter_decisions_total", "by (limit, outcome)", "vendorgate_gateway_limiter_lease_tokens_total", "by (event)",
		"vendorgate_gateway_limiter_lease_admissions_total", "vendorgate_gateway_redis_errors_total", "by (kind)",
		"vendorgate_gateway_redis_breaker_trips_total", "vendorgate_gateway_concurrency_slots_held",
		"vendorgate_gateway_limiter_buckets_charged_total", `instance=~"$gateway"`,
		`limit=~"$quota"`, "increase(vendorgate_gateway_limiter_decisions_total",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("no limiter dashboard panel queries %s", want)
		}
	}
}

// TestHandshakeReasonsDescribed: the dashboard panel of TLS handshake
// failures by reason describes every reason the gateway counts (the
// reason names of gateway/edge), so that a new one is not left for
// the SRE to guess.
func TestHandshakeReasonsDescribed(t *testing.T) {
	src := string(readFile(t, "../gateway/edge/tlslistener.go"))
	m := regexp.MustCompile(`(?m)^var reasonNames = \[NumReasons\]string\{([^}]*)\}`).FindStringSubmatch(src)
	if m == nil {
		t.Fatal("no reasonNames in gateway/edge/tlslistener.go")
	}
	reasons := regexp.MustCompile(`"([a-z_]+)"`).FindAllStringSubmatch(m[1], -1)
	if len(reasons) < 2 {
		t.Fatalf("reasonNames: %q", m[1])
	}
	var panels []map[string]any
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if strings.Contains(fmt.Sprint(v["targets"]), "vendorgate_gateway_tls_handshake_failures_total") {
				panels = append(panels, v)
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(jsonDoc(t, "grafana/dashboards/vendorgate.json"))
	if len(panels) == 0 {
		t.Fatal("no panel of vendorgate.json queries vendorgate_gateway_tls_handshake_failures_total")
	}
	for _, p := range panels {
		desc := str(p["description"])
		for _, r := range reasons {
			if !regexp.MustCompile(`\b` + r[1] + `\b`).MatchString(desc) {
				t.Errorf("panel %q: its description does not name the reason %s", str(p["title"]), r[1])
			}
		}
	}
}

// withoutAnnotations is the rules file at path with its rules'
// annotations removed, for the label-only cases of alerts.gotest.yml.
func withoutAnnotations(t *testing.T, path string) []byte {
	t.Helper()
	doc := yamlDoc(t, path)
	for _, g := range asList(doc["groups"]) {
		for _, r := range asList(asMap(g)["rules"]) {
			delete(asMap(r), "annotations")
		}
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// runMixin runs scripts/mixin.sh with settings (text of a settings file;
// empty: the shipped defaults) into a new directory, and returns it and
// what the script printed.
func runMixin(t *testing.T, settings string) (string, string, error) {
	t.Helper()
	out := t.TempDir()
	args := []string{filepath.Join(repoRoot, "scripts", "mixin.sh")}
	if settings != "" {
		f := filepath.Join(t.TempDir(), "mixin.yml")
		if err := os.WriteFile(f, []byte(settings), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "-s", f)
	}
	b, err := exec.Command("bash", append(args, out)...).CombinedOutput()
	return out, string(b), err
}

// TestMixin: the alert rules and dashboards are a mixin whose settings are
// the job names (prometheus/mixin.yml). With its defaults, scripts/mixin.sh
// writes the shipped files byte for byte (they are its output). With other
// job names, every selector names them and no default is left, the alerts
// are the same ones, the dashboards parse, promtool checks the rules, and
// the alerts' unit cases, their job labels renamed alike, pass against
// them. A job name the dashboards' regular expression would misread, or
// one job for both, is refused.
func TestMixin(t *testing.T) {
	def, out, err := runMixin(t, "")
	if err != nil {
		t.Fatalf("mixin.sh with the defaults: %v\n%s", err, out)
	}
	for got, shipped := range map[string]string{
		"alerts.yml":                         "prometheus/alerts.yml",
		"dashboards/vendorgate.json":         "grafana/dashboards/vendorgate.json",
		"dashboards/vendorgate-limiter.json": "grafana/dashboards/vendorgate-limiter.json",
	} {
		if string(readFile(t, filepath.Join(def, got))) != string(readFile(t, shipped)) {
			t.Errorf("mixin.sh with the shipped settings writes a %s other than %s", got, shipped)
		}
	}
	dashboards, err := filepath.Glob("grafana/dashboards/*.json")
	if err != nil || len(dashboards) != 2 {
		t.Fatalf("dashboards %v (%v): the mixin writes two; a new one goes in scripts/mixin.sh", dashboards, err)
	}

	const gw, be = "monitoring/edge-gw", "orders_api"
	dir, out, err := runMixin(t, "# mine\ngateway_job: \""+gw+"\"  # the edge\nbackend_job: "+be+"\n")
	if err != nil {
		t.Fatalf("mixin.sh: %v\n%s", err, out)
	}
	jobRef := regexp.MustCompile(`job=~?\\?"([^"\\]+)\\?"`)
	var names []string
	jobs := map[string]bool{}
	for _, r := range asList(yamlDoc(t, filepath.Join(dir, "alerts.yml"))["groups"]) {
		for _, rule := range asList(asMap(r)["rules"]) {
			names = append(names, str(asMap(rule)["alert"]))
			for _, m := range jobRef.FindAllStringSubmatch(str(asMap(rule)["expr"]), -1) {
				jobs[m[1]] = true
			}
		}
	}
	if !jobs[gw] || !jobs[be] || len(jobs) != 2 {
		t.Errorf("the generated alerts select the jobs %v, want %s and %s", jobs, gw, be)
	}
	var shippedNames []string
	for _, r := range alertRules(t) {
		shippedNames = append(shippedNames, str(r["alert"]))
	}
	if strings.Join(names, " ") != strings.Join(shippedNames, " ") {
		t.Errorf("generated alerts %v, shipped %v", names, shippedNames)
	}
	for _, f := range []string{"vendorgate.json", "vendorgate-limiter.json"} {
		text := string(readFile(t, filepath.Join(dir, "dashboards", f)))
		var v any
		if err := json.Unmarshal([]byte(text), &v); err != nil {
			t.Errorf("generated %s: %v", f, err)
		}
		if strings.Contains(text, "vendorgate-gateway") || strings.Contains(text, "vendorgate-backend") {
			t.Errorf("generated %s still names a default job", f)
		}
	}
	if !strings.Contains(string(readFile(t, filepath.Join(dir, "dashboards", "vendorgate.json"))), `up{job=~\"`+gw+"|"+be+`\"}`) {
		t.Error("the generated overview's up panel does not select the two jobs")
	}

	for _, bad := range []string{"gateway_job: vendorgate.gateway\n", "gateway_job: a\nbackend_job: a\n", "gateway_job: \"a b\"\n"} {
		if _, out, err := runMixin(t, bad); err == nil {
			t.Errorf("mixin.sh with %q: accepted\n%s", bad, out)
		}
	}

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not on PATH (Debian package: prometheus)")
	}
	if out, err := exec.Command(promtool, "check", "rules", filepath.Join(dir, "alerts.yml")).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules on the generated alerts: %v\n%s", err, out)
	}
	cases := t.TempDir()
	rename := strings.NewReplacer(`job="vendorgate-gateway"`, `job="`+gw+`"`, `job="vendorgate-backend"`, `job="`+be+`"`,
		"job: vendorgate-gateway", `job: "`+gw+`"`, "job: vendorgate-backend", `job: "`+be+`"`)
	if err := os.WriteFile(filepath.Join(cases, "alerts.gotest.yml"), []byte(rename.Replace(string(readFile(t, "prometheus/alerts.gotest.yml")))), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cases, "alerts.yml"), withoutAnnotations(t, filepath.Join(dir, "alerts.yml")), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "test", "rules", "alerts.gotest.yml")
	cmd.Dir = cases
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the alerts' unit cases against the generated rules: %v\n%s", err, out)
	}
}

// TestRunbookMatchesTheRules: the runbook of deploy/README.md (beside
// the alerts table) has one entry per rule, with the text of the rule's
// runbook annotation.
func TestRunbookMatchesTheRules(t *testing.T) {
	text := string(readFile(t, "README.md"))
	_, section, ok := strings.Cut(text, "\n### Runbook\n")
	if !ok {
		t.Fatal("README.md has no ### Runbook section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	entry := regexp.MustCompile(`(?m)^- \*\*(Vendorgate\w+)\*\*: (.*)$`)
	book := map[string]string{}
	for _, m := range entry.FindAllStringSubmatch(section, -1) {
		if _, dup := book[m[1]]; dup {
			t.Errorf("the runbook lists %s twice", m[1])
		}
		book[m[1]] = html.UnescapeString(m[2])
	}
	for _, r := range alertRules(t) {
		name := str(r["alert"])
		got, ok := book[name]
		if !ok {
			t.Errorf("the README's runbook has no entry for %s", name)
			continue
		}
		if want := strings.Join(strings.Fields(str(dig(r, "annotations", "runbook"))), " "); got != want {
			t.Errorf("%s: the README's runbook says\n%s\nthe rule's annotation\n%s", name, got, want)
		}
		delete(book, name)
	}
	for name := range book {
		t.Errorf("the README's runbook has %s, which alerts.yml does not define", name)
	}
}
