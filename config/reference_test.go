package config

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// referencePath is the configuration reference the tests below hold to the
// code: every setting of the config types has one row there, with its
// environment variable and its default, and every row is a setting.
const referencePath = "../docs/configuration.md"

// A setting as the code declares it: where it is written in YAML, the
// environment variable the loader reads for it, and its default.
type declared struct {
	path string        // YAML path: redis.timeout, limits.policies[].name; empty for vendorctl's
	env  string        // the variable the loader looks up, prefix applied; empty when none
	def  reflect.Value // the default; the zero value inside lists and maps
}

// key names a setting in messages and matches it to its row: its YAML path,
// or its environment variable when it has no YAML form (vendorctl).
func (d declared) key() string {
	if d.path != "" {
		return d.path
	}
	return d.env
}

// The placeholders of the reference's paths: a map's key is a vendor id
// (limits.overrides.<vendor_id>), and the fields of a limit, which appears
// at several paths, are written once under <limit>.
const (
	mapKeyPlaceholder = "<vendor_id>"
	limitPlaceholder  = "<limit>"
)

var limitType = reflect.TypeFor[Limit]()

// declaredSettings walks cfg (a pointer to a config struct holding its
// defaults) as the loader does: `yaml` tags give the path, `env` tags the
// variable, renamed by envName as load renames it. A Limit is one setting
// wherever it appears (written as {rate, period, ...}); its own fields are
// listed once, under <limit>.
func declaredSettings(cfg any, envName func(string) string) []declared {
	var out []declared
	limits := false
	var walk func(t reflect.Type, v reflect.Value, prefix string)
	emit := func(path, env string, t reflect.Type, v reflect.Value) {
		if !v.IsValid() {
			v = reflect.Zero(t)
		}
		// A map's entries and a list's items are set in the file only:
		// the environment sets a field of the top-level settings, not of
		// one vendor's override (a struct reused there keeps its env tags).
		if strings.Contains(path, mapKeyPlaceholder) || strings.Contains(path, "[]") {
			env = ""
		}
		if env != "" {
			env = envName(env)
		}
		out = append(out, declared{path: path, env: env, def: v})
	}
	walk = func(t reflect.Type, v reflect.Value, prefix string) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			var fv reflect.Value
			if v.IsValid() {
				fv = v.Field(i)
			}
			// No yaml tag: vendorctl's, read from the environment only.
			// An inline field (a policy's limit) adds nothing to the path.
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "-" {
				continue
			}
			path := prefix
			if name != "" {
				path = strings.TrimPrefix(prefix+"."+name, ".")
			}
			ft := f.Type
			switch {
			case ft == limitType || ft.Kind() == reflect.Pointer && ft.Elem() == limitType:
				limits = true
				emit(path, f.Tag.Get("env"), ft, fv)
			case ft.Kind() == reflect.Struct && f.Tag.Get("env") == "":
				walk(ft, fv, path)
			case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
				walk(ft.Elem(), reflect.Value{}, path+"[]")
			case ft.Kind() == reflect.Map:
				path += "." + mapKeyPlaceholder
				switch et := ft.Elem(); {
				case et == limitType:
					limits = true
					emit(path, "", et, reflect.Value{})
				case et.Kind() == reflect.Struct:
					walk(et, reflect.Value{}, path)
				default:
					emit(path, "", et, reflect.Value{})
				}
			default:
				emit(path, f.Tag.Get("env"), ft, fv)
			}
		}
	}
	walk(reflect.TypeOf(cfg).Elem(), reflect.ValueOf(cfg).Elem(), "")
	if limits {
		walk(limitType, reflect.Value{}, limitPlaceholder)
	}
	return out
}

// envNameOf returns the variable load reads for a tag, by asking the same
// prefixed lookup load uses: the shared KEY_PREFIX_* tags get the binary's
// prefix there.
func envNameOf(prefix string) func(string) string {
	return func(tag string) string {
		var asked string
		prefixed(func(name string) (string, bool) { asked = name; return "", false }, prefix)(tag)
		return asked
	}
}

// A row of the reference: the first code span of each of the first three
// cells (path, environment, default), and whether the default cell starts
// with one.
type referenceRow struct {
	line       int
	path, env  string
	def        string
	hasDefault bool
}

func (r referenceRow) key() string {
	if r.path != "" {
		return r.path
	}
	return r.env
}

var (
	codeSpan     = regexp.MustCompile("`([^`]*)`")
	leadingSpan  = regexp.MustCompile("^`([^`]*)`")
	unescapedBar = regexp.MustCompile(`(^|[^\\])\|`)
)

// referenceTables parses the reference: each table whose header begins
// "| YAML path | environment | default |" under a "## " heading belongs to
// that heading's binary (the heading's first word: Gateway, Backend,
// vendorctl).
func referenceTables(t *testing.T, text string) map[string][]referenceRow {
	t.Helper()
	out := make(map[string][]referenceRow)
	section, inTable := "", false
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if h, ok := strings.CutPrefix(line, "## "); ok {
			section, inTable = strings.Fields(h + " x")[0], false
			continue
		}
		if !strings.HasPrefix(line, "|") {
			inTable = false
			continue
		}
		cells := splitRow(line)
		if !inTable {
			inTable = len(cells) >= 4 && strings.EqualFold(cells[0], "YAML path") &&
				strings.EqualFold(cells[1], "environment") && strings.EqualFold(cells[2], "default")
			continue
		}
		if strings.Trim(cells[0], "-: ") == "" && strings.Trim(cells[1], "-: ") == "" {
			continue // the delimiter row
		}
		if len(cells) < 4 {
			t.Errorf("%s:%d: a settings row has %d cells, want 4 (path, environment, default, meaning)", referencePath, i+1, len(cells))
			continue
		}
		row := referenceRow{line: i + 1, path: firstSpan(cells[0]), env: firstSpan(cells[1])}
		if m := leadingSpan.FindStringSubmatch(cells[2]); m != nil {
			row.def, row.hasDefault = m[1], true
		}
		if row.key() == "" {
			t.Errorf("%s:%d: a settings row names neither a YAML path nor a variable in code spans", referencePath, i+1)
			continue
		}
		out[section] = append(out[section], row)
	}
	return out
}

// splitRow splits a markdown table row on its unescaped bars.
func splitRow(line string) []string {
	line = strings.TrimSuffix(strings.TrimPrefix(line, "|"), "|")
	marked := unescapedBar.ReplaceAllString(line, "$1\x00")
	cells := strings.Split(marked, "\x00")
	for i := range cells {
		cells[i] = strings.TrimSpace(cells[i])
	}
	return cells
}

func firstSpan(cell string) string {
	if m := codeSpan.FindStringSubmatch(cell); m != nil {
		return m[1]
	}
	return ""
}

// parseDefault reads a default written in the reference as the loader
// reads a value of that type: a scalar as its environment variable would
// be written (10s, 90d, a,b), a limit as its YAML ({rate: 120, period:
// 1m}). So 48h and 2d are the same default, and 1m is not 60.
func parseDefault(t reflect.Type, text string) (reflect.Value, error) {
	v := reflect.New(t).Elem()
	if t == limitType || t.Kind() == reflect.Pointer && t.Elem() == limitType {
		var l Limit
		if err := yaml.Unmarshal([]byte(text), &l); err != nil {
			return v, fmt.Errorf("not a limit ({rate: N, period: D}): %v", err)
		}
		if t == limitType {
			v.Set(reflect.ValueOf(l))
		} else {
			v.Set(reflect.ValueOf(&l))
		}
		return v, nil
	}
	return v, setFromString(v, text)
}

// formatDefault writes a code default as the reference would.
func formatDefault(v reflect.Value) string {
	switch {
	case v.IsZero():
		return "none (a word in the default cell: empty, none, off, required)"
	case v.Type() == durationType:
		return shortDuration(time.Duration(v.Int()))
	case v.Kind() == reflect.Slice:
		parts := make([]string, v.Len())
		for i := range parts {
			parts[i] = v.Index(i).String()
		}
		return "`" + strings.Join(parts, ",") + "`"
	case v.Kind() == reflect.Pointer:
		return formatDefault(v.Elem())
	case v.Type() == limitType:
		l := v.Interface().(Limit)
		s := fmt.Sprintf("{rate: %d, period: %s", l.Rate, strings.Trim(shortDuration(l.Period), "`"))
		if l.Burst != 0 {
			s += fmt.Sprintf(", burst: %d", l.Burst)
		}
		return "`" + s + "}`"
	}
	return fmt.Sprintf("`%v`", v.Interface())
}

// shortDuration drops Go's trailing zero units: 1m, not 1m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return "`" + s + "`"
}

// referenceProblems compares the declared settings of one binary with its
// rows in the reference and says what differs, one line each.
func referenceProblems(binary string, settings []declared, rows []referenceRow) []string {
	var problems []string
	byKey := make(map[string]declared, len(settings))
	for _, s := range settings {
		byKey[s.key()] = s
	}
	seen := make(map[string]int, len(rows))
	for _, r := range rows {
		k := r.key()
		if first, dup := seen[k]; dup {
			problems = append(problems, fmt.Sprintf("line %d: %s %s has a second row (the first is line %d)", r.line, binary, k, first))
			continue
		}
		seen[k] = r.line
		s, ok := byKey[k]
		if !ok {
			problems = append(problems, fmt.Sprintf("line %d: `%s` is no %s setting: remove the row or add the setting to config/", r.line, k, binary))
			continue
		}
		if r.env != s.env {
			problems = append(problems, fmt.Sprintf("line %d: %s %s reads environment %q, the row says %q", r.line, binary, k, s.env, r.env))
		}
		if !r.hasDefault {
			if !s.def.IsZero() {
				problems = append(problems, fmt.Sprintf("line %d: %s %s defaults to %s in the code; the row's default cell must start with it", r.line, binary, k, formatDefault(s.def)))
			}
			continue
		}
		got, err := parseDefault(s.def.Type(), r.def)
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("line %d: %s %s: default `%s` does not read as the setting would: %v (the code's: %s)", r.line, binary, k, r.def, err, formatDefault(s.def)))
		case !reflect.DeepEqual(got.Interface(), s.def.Interface()):
			problems = append(problems, fmt.Sprintf("line %d: %s %s: the reference's default is `%s`, the code's is %s", r.line, binary, k, r.def, formatDefault(s.def)))
		}
	}
	var missing []string
	for _, s := range settings {
		if _, ok := seen[s.key()]; !ok {
			env := s.env
			if env == "" {
				env = "no variable"
			}
			missing = append(missing, fmt.Sprintf("%s %s (%s, default %s) has no row in the reference", binary, s.key(), env, formatDefault(s.def)))
		}
	}
	sort.Strings(missing)
	return append(problems, missing...)
}

// referenceBinaries are the configurations the reference documents, under
// the "## " heading whose first word is the key.
func referenceBinaries() map[string][]declared {
	return map[string][]declared{
		"Gateway":   declaredSettings(DefaultGateway(), envNameOf("GATEWAY_")),
		"Backend":   declaredSettings(DefaultBackend(), envNameOf("BACKEND_")),
		"vendorctl": declaredSettings(DefaultVendorctl(), func(s string) string { return s }),
	}
}

func checkReference(t *testing.T, text string) []string {
	t.Helper()
	tables := referenceTables(t, text)
	var problems []string
	binaries := referenceBinaries()
	for section := range tables {
		if _, ok := binaries[section]; !ok {
			problems = append(problems, fmt.Sprintf("a settings table under %q, which is no binary's heading (Gateway, Backend, vendorctl)", section))
		}
	}
	for _, binary := range []string{"Gateway", "Backend", "vendorctl"} {
		problems = append(problems, referenceProblems(binary, binaries[binary], tables[binary])...)
	}
	return problems
}

// TestConfigurationReference: docs/configuration.md has one row per
// setting of the gateway, the backend and vendorctl, with the variable the
// loader reads and the default the code sets, and no row for a setting
// that does not exist. A setting added to config/ without its row fails
// here, and so does a default changed on one side only.
func TestConfigurationReference(t *testing.T) {
	data, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range checkReference(t, string(data)) {
		t.Errorf("%s: %s", referencePath, p)
	}
}

// TestConfigurationReferenceCatchesDrift: the check above fails for a row
// removed, a row for no setting, a default changed and a variable renamed,
// so a pass means something.
func TestConfigurationReferenceCatchesDrift(t *testing.T) {
	data, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	rowOf := func(path string) string {
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(line, "| `"+path+"` |") {
				return line
			}
		}
		t.Fatalf("no row for %s", path)
		return ""
	}
	timeout := rowOf("redis.timeout")
	cases := []struct {
		name, text, want string
	}{
		{"row removed", strings.Replace(text, timeout+"\n", "", 1),
			"Gateway redis.timeout (GATEWAY_REDIS_TIMEOUT, default `50ms`) has no row"},
		{"row for no setting", strings.Replace(text, timeout+"\n", timeout+"\n| `redis.timeout_extra` | `GATEWAY_REDIS_TIMEOUT_EXTRA` | `1s` | none |\n", 1),
			"`redis.timeout_extra` is no Gateway setting"},
		{"default changed", strings.Replace(text, timeout, strings.Replace(timeout, "`50ms`", "`60ms`", 1), 1),
			"the reference's default is `60ms`, the code's is `50ms`"},
		{"variable renamed", strings.Replace(text, timeout, strings.Replace(timeout, "GATEWAY_REDIS_TIMEOUT", "GATEWAY_REDIS_TIMEOUT_MS", 1), 1),
			`reads environment "GATEWAY_REDIS_TIMEOUT", the row says "GATEWAY_REDIS_TIMEOUT_MS"`},
		{"limit default changed", strings.Replace(text, "`{rate: 120, period: 1m}`", "`{rate: 120, period: 1h}`", 1),
			"limits.vendor.reads: the reference's default is `{rate: 120, period: 1h}`, the code's is `{rate: 120, period: 1m}`"},
		{"list element field removed", strings.Replace(text, rowOf("limits.policies[].scope")+"\n", "", 1),
			"Gateway limits.policies[].scope (no variable"},
		{"backend row removed", strings.Replace(text, rowOf("key_lifetime")+"\n", "", 1),
			"Backend key_lifetime (BACKEND_KEY_LIFETIME, default `2160h`) has no row"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.text == text {
				t.Fatal("the case changed nothing")
			}
			problems := checkReference(t, tc.text)
			for _, p := range problems {
				if strings.Contains(p, tc.want) {
					return
				}
			}
			t.Fatalf("no problem says %q; got %q", tc.want, problems)
		})
	}
}

// The config source files whose field comments are held to the defaults.
var commentedFiles = []string{"gateway.go", "backend.go", "limits.go", "list.go", "load.go"}

// commentDefault finds a default stated in a field's comment: "Default X"
// or "(default X": X is a quoted string up to its closing quote, or the
// word after it without its trailing punctuation ("Default 10s." is 10s,
// "Default 4096 (32 kbit/s)" is 4096).
var commentDefault = regexp.MustCompile(`(?:^|[^a-z])(?:Default|\(default) ("[^"]*"|\S+)`)

// fieldDefaults are the defaults of every field of config's struct types
// as the Default* functions set them, by "Type.Field": each value found
// where a default can be (not inside a list or a map).
func fieldDefaults() map[string][]reflect.Value {
	out := make(map[string][]reflect.Value)
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		if v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return
			}
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			return
		}
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			if f := t.Field(i); f.IsExported() {
				out[t.Name()+"."+f.Name] = append(out[t.Name()+"."+f.Name], v.Field(i))
				walk(v.Field(i))
			}
		}
	}
	walk(reflect.ValueOf(DefaultGateway()))
	walk(reflect.ValueOf(DefaultBackend()))
	walk(reflect.ValueOf(DefaultVendorctl()))
	return out
}

// commentProblems reads the field comments of the Go source src (one
// file of this package) and says, one line each, where a default a
// comment states is not the default the code sets.
func commentProblems(t *testing.T, name, src string, defaults map[string][]reflect.Value) (problems []string, checked int) {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok {
			return true
		}
		st, ok := ts.Type.(*ast.StructType)
		if !ok {
			return false
		}
		for _, field := range st.Fields.List {
			if field.Doc == nil {
				continue
			}
			text := strings.Join(strings.Fields(field.Doc.Text()), " ")
			for _, fn := range field.Names {
				key := ts.Name.Name + "." + fn.Name
				for _, m := range commentDefault.FindAllStringSubmatch(text, -1) {
					checked++
					stated := m[1]
					if strings.HasPrefix(stated, `"`) {
						stated = strings.Trim(stated, `"`)
					} else {
						stated = strings.TrimRight(stated, ".,;:)")
					}
					at := fmt.Sprintf("%s:%d: %s", name, fset.Position(field.Pos()).Line, key)
					values := defaults[key]
					if len(values) == 0 {
						problems = append(problems, fmt.Sprintf("%s: the comment states default %q, but no Default function sets the field", at, stated))
					}
					for _, def := range values {
						got, err := parseDefault(def.Type(), stated)
						switch {
						case err != nil:
							problems = append(problems, fmt.Sprintf("%s: the comment's default %q does not read as the setting would: %v (the code's: %s)", at, stated, err, formatDefault(def)))
						case !reflect.DeepEqual(got.Interface(), def.Interface()):
							problems = append(problems, fmt.Sprintf("%s: the comment's default is %q, the code's is %s", at, stated, formatDefault(def)))
						}
					}
				}
			}
		}
		return false
	})
	return problems, checked
}

// TestCommentsStateTheDefaults: a default a config field's comment states
// ("Default 50ms: past it...") is the one the Default functions set, as
// the reference's are (TestConfigurationReference). A default changed in
// the code and not in its comment fails here.
func TestCommentsStateTheDefaults(t *testing.T) {
	defaults := fieldDefaults()
	checked := 0
	for _, name := range commentedFiles {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		problems, n := commentProblems(t, name, string(src), defaults)
		for _, p := range problems {
			t.Error(p)
		}
		checked += n
	}
	// Most settings' comments state their default: a pattern that no
	// longer finds them would pass with nothing checked.
	if checked < 60 {
		t.Errorf("%d comments' defaults checked, want at least 60", checked)
	}
	t.Logf("%d comments' defaults checked", checked)
}

// TestCommentsStateTheDefaultsCatchesDrift: the check above fails for a
// comment whose default differs from the code's, so a pass means
// something.
func TestCommentsStateTheDefaultsCatchesDrift(t *testing.T) {
	src, err := os.ReadFile("gateway.go")
	if err != nil {
		t.Fatal(err)
	}
	defaults := fieldDefaults()
	for _, tc := range []struct{ from, to, want string }{
		{"Default 50ms:", "Default 60ms:", `Redis.Timeout: the comment's default is "60ms", the code's is ` + "`50ms`"},
		{`Default ":8080".`, `Default ":8081".`, `Gateway.Listen: the comment's default is ":8081"`},
		{"Default 128.", "Default 129.", "Redis.PipelineMax: the comment's default is \"129\""},
	} {
		changed := strings.Replace(string(src), tc.from, tc.to, 1)
		if changed == string(src) {
			t.Fatalf("%q is not in gateway.go", tc.from)
		}
		problems, _ := commentProblems(t, "gateway.go", changed, defaults)
		found := false
		for _, p := range problems {
			found = found || strings.Contains(p, tc.want)
		}
		if !found {
			t.Errorf("%s → %s: no problem says %q; got %q", tc.from, tc.to, tc.want, problems)
		}
	}
}

// messageDefault finds a default a validation message states after the
// setting it names first: "read_timeout: %s must be ... (default 10s)".
var (
	messagePath    = regexp.MustCompile(`^([a-z_]+(?:\.[a-z_]+)*)[ :]`)
	messageDefault = regexp.MustCompile(`(?:\(|; )default (\S+)`)
)

// messageProblems reads the string literals of the Go source src (one
// file of this package, whose settings are settings') and says, one line
// each, where a message that names a setting states a default that is not
// the code's.
func messageProblems(t *testing.T, name, src string, settings []declared) (problems []string, checked int) {
	t.Helper()
	byPath := make(map[string]declared, len(settings))
	for _, s := range settings {
		byPath[s.path] = s
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, 0)
	if err != nil {
		t.Fatal(err)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		lit, ok := n.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		text, err := strconv.Unquote(lit.Value)
		if err != nil {
			return true
		}
		p, d := messagePath.FindStringSubmatch(text), messageDefault.FindStringSubmatch(text)
		if p == nil || d == nil {
			return true
		}
		checked++
		at := fmt.Sprintf("%s:%d: %q", name, fset.Position(lit.Pos()).Line, text)
		s, ok := byPath[p[1]]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: states a default of %s, which is no setting", at, p[1]))
			return true
		}
		stated := strings.TrimRight(d[1], ".,;:)")
		got, err := parseDefault(s.def.Type(), stated)
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("%s: the default %q does not read as %s would: %v (the code's: %s)", at, stated, p[1], err, formatDefault(s.def)))
		case !reflect.DeepEqual(got.Interface(), s.def.Interface()):
			problems = append(problems, fmt.Sprintf("%s: the message's default of %s is %q, the code's is %s", at, p[1], stated, formatDefault(s.def)))
		}
		return true
	})
	return problems, checked
}

// The files whose messages state defaults, and whose settings they name.
func messageFiles() map[string][]declared {
	gateway := declaredSettings(DefaultGateway(), envNameOf("GATEWAY_"))
	return map[string][]declared{"gateway.go": gateway, "limits.go": gateway,
		"backend.go": declaredSettings(DefaultBackend(), envNameOf("BACKEND_"))}
}

// TestMessagesStateTheDefaults: a validation message that states the
// default of the setting it refuses ("read_timeout: ... (default 10s)")
// states the code's, so an operator told to go back to it gets a value
// that loads.
func TestMessagesStateTheDefaults(t *testing.T) {
	checked := 0
	for name, settings := range messageFiles() {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		problems, n := messageProblems(t, name, string(src), settings)
		for _, p := range problems {
			t.Error(p)
		}
		checked += n
	}
	if checked < 15 {
		t.Errorf("%d messages' defaults checked, want at least 15", checked)
	}
	t.Logf("%d messages' defaults checked", checked)

	// A message whose default drifted is reported.
	src, err := os.ReadFile("gateway.go")
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(string(src), "between 1 and 1024 (default 8)", "between 1 and 1024 (default 9)", 1)
	if changed == string(src) {
		t.Fatal("the redis_pool_size message is not in gateway.go")
	}
	problems, _ := messageProblems(t, "gateway.go", changed, messageFiles()["gateway.go"])
	if len(problems) != 1 || !strings.Contains(problems[0], `the message's default of failed_keys.redis_pool_size is "9", the code's is `+"`8`") {
		t.Errorf("a drifted message's default: %q", problems)
	}
}
