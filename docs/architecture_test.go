package docs

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// The code map (architecture.md) names paths from the module's root in the
// first column of its tables: a Go package by its folder (`gateway/limit`,
// or `gateway/` with a slash), a file by its path (`gateway/flow.go`).

var (
	tableRow  = regexp.MustCompile(`^\s*\|([^|]*)\|`)
	separator = regexp.MustCompile(`^\s*\|\s*:?-{3,}`)
)

// namedPaths returns the paths the first column of the page's tables
// names, cleaned (no trailing slash), each with the line it is on.
func namedPaths(text string) map[string]int {
	out := make(map[string]int)
	for i, line := range prose(text) {
		if separator.MatchString(line) {
			continue
		}
		m := tableRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		for _, span := range codeSpan.FindAllString(m[1], -1) {
			p := strings.TrimSuffix(strings.Trim(span, "`"), "/")
			if p == "" {
				continue
			}
			if _, ok := out[p]; !ok {
				out[p] = i + 1
			}
		}
	}
	return out
}

// tree is what the page is checked against: the Go packages' folders
// (relative to the module's root, slash-separated) and a way to read the
// repository.
type tree struct {
	packages []string
	// exists reports whether a path (file or folder) is in the repository.
	exists func(path string) bool
	// goFiles lists the non-test Go files of a folder, as paths from the
	// root.
	goFiles func(dir string) []string
}

// mapProblems lists what the page at name (its text given) gets wrong of
// the tree: a package it does not name, a path it names that does not
// exist, and, in a folder some of whose Go files it lists, a non-test Go
// file it does not list.
func mapProblems(name, text string, t tree) []string {
	named := namedPaths(text)
	var problems []string
	var paths []string
	for p := range named {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	listsFilesOf := make(map[string]bool)
	for _, p := range paths {
		if !t.exists(p) {
			problems = append(problems, fmt.Sprintf("%s:%d: %s: no such file or folder", name, named[p], p))
			continue
		}
		if strings.HasSuffix(p, ".go") {
			listsFilesOf[pathDir(p)] = true
		}
	}
	for _, pkg := range t.packages {
		if _, ok := named[pkg]; !ok {
			problems = append(problems, fmt.Sprintf("%s: package %s is not named", name, pkg))
		}
	}
	var dirs []string
	for d := range listsFilesOf {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	for _, d := range dirs {
		for _, f := range t.goFiles(d) {
			if _, ok := named[f]; !ok {
				problems = append(problems, fmt.Sprintf("%s: file %s is not named (the page lists the files of %s)", name, f, d))
			}
		}
	}
	return problems
}

// pathDir is the folder of a slash-separated path, "" at the root.
func pathDir(p string) string {
	i := strings.LastIndex(p, "/")
	if i < 0 {
		return ""
	}
	return p[:i]
}

// goPackages lists the folders of the Go packages of the module at dir,
// relative to root: go list's own view of the tree (build constraints,
// testdata and nested modules as the go command sees them), without
// resolving any dependency.
func goPackages(t *testing.T, root, dir string) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-find", "-f", "{{.Dir}}", "./...")
	cmd.Dir = filepath.Join(root, dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list in %s: %v", cmd.Dir, err)
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	var pkgs []string
	for _, d := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(abs, d)
		if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, filepath.ToSlash(rel))
	}
	return pkgs
}

// TestArchitectureNamesEveryPackage: docs/architecture.md names every Go
// package of the module and of the bench module, names no path that does
// not exist, and where it lists a folder's Go files (the root packages of
// gateway/ and backend/) lists them all. A package added, moved or
// removed fails here until its row in the page follows.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	page := filepath.Join(repoRoot, "docs", "architecture.md")
	text, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	pkgs := append(goPackages(t, repoRoot, "."), goPackages(t, repoRoot, "bench")...)
	if len(pkgs) < 40 {
		t.Fatalf("go list found only %d packages: %v", len(pkgs), pkgs)
	}
	if n := len(namedPaths(string(text))); n < 40 {
		t.Fatalf("the page names only %d paths: is the parser reading its tables?", n)
	}
	repo := tree{
		packages: pkgs,
		exists: func(p string) bool {
			_, err := os.Stat(filepath.Join(repoRoot, filepath.FromSlash(p)))
			return err == nil
		},
		goFiles: func(dir string) []string {
			files, err := filepath.Glob(filepath.Join(repoRoot, filepath.FromSlash(dir), "*.go"))
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, f := range files {
				if strings.HasSuffix(f, "_test.go") {
					continue
				}
				out = append(out, strings.TrimPrefix(dir+"/"+filepath.Base(f), "/"))
			}
			return out
		},
	}
	for _, p := range mapProblems("docs/architecture.md", string(text), repo) {
		t.Error(p)
	}
}

// TestMapProblemsAreFound: the check above reports a package the page
// leaves out, a named package or file that does not exist, and a file of a
// listed folder left out; it reads only the first column of tables, and
// takes a folder with or without its slash.
func TestMapProblemsAreFound(t *testing.T) {
	files := map[string]bool{
		"gateway": true, "gateway/flow.go": true, "gateway/tls.go": true, "gateway/gateway_test.go": true,
		"gateway/limit": true, "gateway/limit/allow.go": true,
		"gateway/edge": true, "shared": true, "shared/wire": true,
	}
	repo := tree{
		packages: []string{"gateway", "gateway/limit", "gateway/edge", "shared/wire"},
		exists:   func(p string) bool { return files[p] },
		goFiles: func(dir string) []string {
			var out []string
			for f := range files {
				if strings.HasSuffix(f, ".go") && !strings.HasSuffix(f, "_test.go") && pathDir(f) == dir {
					out = append(out, f)
				}
			}
			sort.Strings(out)
			return out
		},
	}
	page := strings.Join([]string{
		"# Map",
		"",
		"`gateway/edge` in prose names nothing.",
		"",
		"| path | what |",
		"|---|---|",
		"| `gateway/`, `shared/` | the parts; `gateway/edge` in the second column names nothing |",
		"| `gateway/flow.go` | the flow |",
		"| `gateway/limit` | limits |",
		"| `gateway/admission` | not yet there |",
		"| `shared/wire/old.go` | gone |",
		"",
		"```",
		"| `shared/wire` | in a fence |",
		"```",
	}, "\n")
	got := mapProblems("p.md", page, repo)
	want := []string{
		"p.md:10: gateway/admission: no such file or folder",
		"p.md:11: shared/wire/old.go: no such file or folder",
		"p.md: package gateway/edge is not named",
		"p.md: package shared/wire is not named",
		"p.md: file gateway/tls.go is not named (the page lists the files of gateway)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
