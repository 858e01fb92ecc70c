package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"vendorgate/config"
)

// The tests run in deploy/; the module root is one level up.
const repoRoot = ".."

// LBReadyzPath is the gateway readiness a load balancer or an orchestrator
// probes: the replica's own fitness, without the dependencies every replica
// shares (docs/operating.md, "Readiness").
const LBReadyzPath = "/readyz?exclude=redis&exclude=backend"

// dummyToken stands in for every secret when a configuration is loaded: long
// enough for the binaries' 16-character minimum.
const dummyToken = "test-token-0123456789abcdef"

// dummySigning stands in for the key-signing secrets: 32+ characters, and
// not the internal token, as the binaries require.
const dummySigning = "test-key-signing-secret-0123456789abcdef"

// dummySecret is the stand-in for the secret variable name.
func dummySecret(name string) string {
	if strings.Contains(name, "KEY_SIGNING_SECRETS") {
		return dummySigning
	}
	return dummyToken
}

// files lists the files under deploy/ whose names end with one of exts.
func files(t *testing.T, exts ...string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		for _, e := range exts {
			if strings.HasSuffix(path, e) {
				out = append(out, path)
				break
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readFileErr(path string) ([]byte, error) { return os.ReadFile(path) }

func writeFile(path, text string) error { return os.WriteFile(path, []byte(text), 0o600) }

// yamlDocs decodes every document of a (multi-document) YAML file.
func yamlDocs(t *testing.T, path string) []any {
	t.Helper()
	docs, err := decodeYAMLDocs(readFile(t, path))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return docs
}

func decodeYAMLDocs(data []byte) ([]any, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []any
	for {
		var doc any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		if doc != nil {
			docs = append(docs, doc)
		}
	}
}

func yamlDoc(t *testing.T, path string) map[string]any {
	t.Helper()
	docs := yamlDocs(t, path)
	if len(docs) != 1 {
		t.Fatalf("%s: %d YAML documents, want 1", path, len(docs))
	}
	return asMap(docs[0])
}

func jsonDoc(t *testing.T, path string) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(readFile(t, path), &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

// asMap, asList and str read decoded YAML/JSON leniently: a missing or
// differently typed value reads as empty, and the assertions then fail on it.
func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

func str(v any) string {
	if v == nil {
		return ""
	}
	if s, ok := v.(string); ok {
		return s
	}
	return fmt.Sprint(v)
}

// dig follows keys through nested maps.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		v = asMap(v)[k]
	}
	return v
}

// ---- metric names --------------------------------------------------------

var metricRef = regexp.MustCompile(`vendorgate_[a-z_]*[a-z]`)

// metricsInExpr returns the vendorgate metric names a PromQL expression uses.
func metricsInExpr(expr string) []string { return metricRef.FindAllString(expr, -1) }

// resolveMetric maps a name as queried to the name a registry exports:
// histogram series carry _bucket, _sum and _count after the base name.
func resolveMetric(name string, known map[string]string) (string, bool) {
	if _, ok := known[name]; ok {
		return name, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if _, ok := known[base]; ok {
				return base, true
			}
		}
	}
	return name, false
}

// exportedMetrics scans the gateway's and backend's Go sources (tests
// excluded) for the metric names they register, mapped to the file that
// names each. Names are string literals ("vendorgate_gateway_requests_total"),
// concatenations of literals and range variables over a literal string list
// ("vendorgate_gateway_key_cache_" + name + "_total"), or Namespace /
// Subsystem / Name options.
func exportedMetrics(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	full := regexp.MustCompile(`^vendorgate_[a-z_]*[a-z]$`)
	add := func(name, path string) {
		if full.MatchString(name) {
			if _, ok := out[name]; !ok {
				out[name] = path
			}
		}
	}
	for _, dir := range []string{"gateway", "backend", "cmd/gateway", "cmd/backend"} {
		root := filepath.Join(repoRoot, dir)
		if _, err := os.Stat(root); err != nil {
			continue // not written yet: its names are then reported missing
		}
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parseGo(path)
			if err != nil {
				t.Logf("skipping %s (does not parse yet): %v", path, err)
				return nil
			}
			for _, name := range metricNamesInFile(f) {
				add(name, path)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func parseGo(path string) (*ast.File, error) {
	return parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
}

// metricNamesInFile returns every string a file's literals and
// concatenations can produce; callers keep those shaped like metric names.
func metricNamesInFile(f *ast.File) []string {
	// Range variables over a literal list of strings, by name. Names are
	// matched by identifier only, which is precise enough for the few
	// metric-building loops a file has.
	rangeVals := map[string][]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		rs, ok := n.(*ast.RangeStmt)
		if !ok {
			return true
		}
		id, ok := rs.Value.(*ast.Ident)
		lit, ok2 := rs.X.(*ast.CompositeLit)
		if !ok || !ok2 {
			return true
		}
		var vals []string
		for _, e := range lit.Elts {
			if s, ok := stringLit(e); ok {
				vals = append(vals, s)
			}
		}
		if len(vals) == len(lit.Elts) {
			rangeVals[id.Name] = append(rangeVals[id.Name], vals...)
		}
		return true
	})

	var names []string
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BinaryExpr:
			if n.Op != token.ADD {
				return true
			}
			if vals, ok := evalConcat(n, rangeVals); ok {
				names = append(names, vals...)
				return false // not its partial sums
			}
		case *ast.BasicLit:
			if s, ok := stringLit(n); ok {
				names = append(names, s)
			}
		case *ast.CompositeLit:
			var parts [3]string // Namespace, Subsystem, Name
			found := false
			for _, e := range n.Elts {
				kv, ok := e.(*ast.KeyValueExpr)
				if !ok {
					continue
				}
				key, _ := kv.Key.(*ast.Ident)
				val, ok := stringLit(kv.Value)
				if key == nil || !ok {
					continue
				}
				switch key.Name {
				case "Namespace":
					parts[0], found = val, true
				case "Subsystem":
					parts[1], found = val, true
				case "Name":
					parts[2] = val
				}
			}
			if found && parts[2] != "" {
				var nonEmpty []string
				for _, p := range parts {
					if p != "" {
						nonEmpty = append(nonEmpty, p)
					}
				}
				names = append(names, strings.Join(nonEmpty, "_"))
			}
		}
		return true
	})
	return names
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// evalConcat evaluates a + chain of string literals and known range
// variables to every string it can take.
func evalConcat(e ast.Expr, rangeVals map[string][]string) ([]string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		s, ok := stringLit(e)
		return []string{s}, ok
	case *ast.Ident:
		vals, ok := rangeVals[e.Name]
		return vals, ok
	case *ast.ParenExpr:
		return evalConcat(e.X, rangeVals)
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			return nil, false
		}
		left, ok := evalConcat(e.X, rangeVals)
		if !ok {
			return nil, false
		}
		right, ok := evalConcat(e.Y, rangeVals)
		if !ok {
			return nil, false
		}
		var out []string
		for _, l := range left {
			for _, r := range right {
				out = append(out, l+r)
			}
		}
		return out, true
	}
	return nil, false
}

// contractMetrics are the metric names docs/CONTRACTS.md promises.
func contractMetrics(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, name := range metricRef.FindAllString(string(readFile(t, filepath.Join(repoRoot, "docs", "CONTRACTS.md"))), -1) {
		out[name] = "docs/CONTRACTS.md"
	}
	if len(out) == 0 {
		t.Fatal("docs/CONTRACTS.md names no vendorgate_ metric")
	}
	return out
}

// queries are the PromQL expressions of the alert rules and the dashboard,
// each with where it is used.
type query struct{ where, expr string }

func alertRules(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, g := range asList(yamlDoc(t, "prometheus/alerts.yml")["groups"]) {
		for _, r := range asList(asMap(g)["rules"]) {
			out = append(out, asMap(r))
		}
	}
	if len(out) == 0 {
		t.Fatal("prometheus/alerts.yml has no rules")
	}
	return out
}

func alertQueries(t *testing.T) []query {
	var out []query
	for _, r := range alertRules(t) {
		out = append(out, query{"alerts.yml " + str(r["alert"]) + str(r["record"]), str(r["expr"])})
	}
	return out
}

func dashboardQueries(t *testing.T) []query {
	t.Helper()
	var out []query
	var walk func(where string, v any)
	walk = func(where string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if title := str(v["title"]); title != "" {
				where = title
			}
			for k, c := range v {
				if s, ok := c.(string); ok && (k == "expr" || k == "query" || k == "definition") {
					out = append(out, query{"dashboard panel " + strconv.Quote(where), s})
					continue
				}
				walk(where, c)
			}
		case []any:
			for _, c := range v {
				walk(where, c)
			}
		}
	}
	files, err := filepath.Glob("grafana/dashboards/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards under grafana/dashboards: %v", err)
	}
	for _, f := range files {
		walk(filepath.Base(f), jsonDoc(t, f))
	}
	if len(out) == 0 {
		t.Fatal("the dashboard has no queries")
	}
	return out
}

// ---- configuration -------------------------------------------------------

// configEnvNames are the environment variables the config package reads:
// every `env:"NAME"` tag, with the shared KEY_PREFIX_* tags under both
// binaries' prefixes.
func configEnvNames(t *testing.T) map[string]bool {
	t.Helper()
	tag := regexp.MustCompile("env:\"([A-Z0-9_]+)\"")
	paths, err := filepath.Glob(filepath.Join(repoRoot, "config", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		for _, m := range tag.FindAllStringSubmatch(string(readFile(t, p)), -1) {
			if strings.HasPrefix(m[1], "KEY_PREFIX_") {
				out["GATEWAY_"+m[1]] = true
				out["BACKEND_"+m[1]] = true
				continue
			}
			out[m[1]] = true
		}
	}
	if len(out) < 10 {
		t.Fatalf("found only %d env tags in config/*.go", len(out))
	}
	return out
}

// runtimeEnv are variables for the Go runtime, not vendorgate settings.
var runtimeEnv = map[string]bool{"GOMEMLIMIT": true, "GOMAXPROCS": true, "GOGC": true, "GODEBUG": true, "TZ": true}

var interp = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)(?:(:?[-?])([^}]*))?\}`)

// interpolate expands compose-style ${VAR}, ${VAR:-default} and ${VAR:?msg}
// as a fresh checkout would: defaults apply, required variables (the
// tokens) get dummyToken.
func interpolate(s string) string {
	return interp.ReplaceAllStringFunc(s, func(m string) string {
		p := interp.FindStringSubmatch(m)
		switch strings.TrimPrefix(p[2], ":") {
		case "-":
			return p[3]
		case "?":
			return dummySecret(p[1])
		}
		return ""
	})
}

// binary says which vendorgate binary an image runs: "gateway", "backend",
// "vendorctl", or "" for any other image.
func binary(image string) string {
	for _, b := range []string{"gateway", "backend", "vendorctl"} {
		if strings.HasPrefix(image, "vendorgate/"+b+":") || image == "vendorgate/"+b {
			return b
		}
	}
	return ""
}

// effective is the listener part of a loaded configuration.
type effective struct {
	listen, admin string
	grace         float64 // shutdown_grace in seconds
}

// loadConfig loads the configuration a binary would run with: the YAML text
// (none when empty) and env, through the config package itself, so a value
// the binary would refuse fails here too.
func loadConfig(t *testing.T, bin string, yamlText []byte, env map[string]string) effective {
	t.Helper()
	path := ""
	if len(yamlText) > 0 {
		path = filepath.Join(t.TempDir(), bin+".yaml")
		if err := os.WriteFile(path, yamlText, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	lookup := func(name string) (string, bool) { v, ok := env[name]; return v, ok }
	switch bin {
	case "gateway":
		cfg, err := config.LoadGateway(path, lookup)
		if err != nil {
			t.Fatalf("gateway configuration does not load: %v", err)
		}
		return effective{cfg.Listen, cfg.AdminListen, cfg.ShutdownGrace.Seconds()}
	case "backend":
		cfg, err := config.LoadBackend(path, lookup)
		if err != nil {
			t.Fatalf("backend configuration does not load: %v", err)
		}
		return effective{cfg.Listen, cfg.AdminListen, cfg.ShutdownGrace.Seconds()}
	}
	t.Fatalf("no configuration for %q", bin)
	return effective{}
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%q is not host:port", addr)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("%q has no numeric port", addr)
	}
	return n
}

// reachable says whether a listener on addr can be reached from outside its
// container or pod: it must not be bound to loopback.
func reachable(t *testing.T, addr string) bool {
	t.Helper()
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%q is not host:port", addr)
	}
	return host == "" || host == "0.0.0.0" || host == "::"
}

// secretKeys are the configuration keys that hold secrets: never in a
// deploy file.
var secretKeys = []string{"internal_token", "admin_token", "key_signing_secrets"}

// ---- systemd -------------------------------------------------------------

// unit is a parsed systemd unit: section → key → values in order.
type unit map[string]map[string][]string

func parseUnit(t *testing.T, path string) unit {
	t.Helper()
	u := unit{}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(readFile(t, path)))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = strings.Trim(line, "[]")
			if u[section] == nil { // a drop-in's section adds to the unit's
				u[section] = map[string][]string{}
			}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: not key=value in a section: %q", path, n, line)
			}
			u[section][k] = append(u[section][k], v)
		}
	}
	return u
}

func (u unit) get(section, key string) string {
	vals := u[section][key]
	if len(vals) == 0 {
		return ""
	}
	return vals[len(vals)-1]
}

// envFileNames reads NAME=value lines of an env file, commented examples
// ("# NAME=value") included.
func envFileNames(t *testing.T, path string) map[string]string {
	t.Helper()
	re := regexp.MustCompile(`^#?\s*([A-Z][A-Z0-9_]*)=(.*)$`)
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(readFile(t, path)))
	for sc.Scan() {
		if m := re.FindStringSubmatch(strings.TrimSpace(sc.Text())); m != nil {
			out[m[1]] = m[2]
		}
	}
	return out
}

// ---- Dockerfiles ---------------------------------------------------------

type instruction struct {
	cmd, args string
}

// dockerInstructions reads a Dockerfile's instructions, continuation lines
// joined and comments dropped.
func dockerInstructions(t *testing.T, path string) []instruction {
	t.Helper()
	var out []instruction
	var cur strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(readFile(t, path)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || (line == "" && cur.Len() == 0) {
			continue
		}
		if rest, ok := strings.CutSuffix(line, "\\"); ok {
			cur.WriteString(rest + " ")
			continue
		}
		cur.WriteString(line)
		full := strings.TrimSpace(cur.String())
		cur.Reset()
		if full == "" {
			continue
		}
		cmd, args, _ := strings.Cut(full, " ")
		out = append(out, instruction{strings.ToUpper(cmd), strings.TrimSpace(args)})
	}
	return out
}
