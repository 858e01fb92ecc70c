package deploy

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestMakeTestRunsEveryPackage holds what docs/performance.md says of
// `make test`, read from `make -n test`: the race run names the longest
// packages first (each an existing package with tests) and then ./..., so
// that every package runs once; the allocation guards run again without
// -race in exactly the packages that have one, none missing.
func TestMakeTestRunsEveryPackage(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not on PATH")
	}
	cmd := exec.Command("make", "-n", "test")
	cmd.Dir = repoRoot
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n test: %v\n%s", err, out)
	}
	var race, allocs []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 2 && f[1] == "test" && strings.Contains(line, " -race ") && !strings.HasPrefix(line, "cd "):
			race = f
		case len(f) > 2 && f[1] == "test" && strings.Contains(line, "'Allocs$'"):
			allocs = f
		}
	}
	if race == nil || allocs == nil {
		t.Fatalf("make -n test has no race run or no allocation run:\n%s", out)
	}
	pkgs := packageArgs(race)
	if len(pkgs) < 2 || pkgs[len(pkgs)-1] != "./..." {
		t.Fatalf("the race run %q does not end with ./...", strings.Join(race, " "))
	}
	for _, p := range pkgs[:len(pkgs)-1] {
		if tests, _ := filepath.Glob(filepath.Join(repoRoot, p, "*_test.go")); len(tests) == 0 {
			t.Errorf("the race run names %s first, which has no tests (moved or renamed?)", p)
		}
	}

	guard := regexp.MustCompile(`(?m)^func Test\w*Allocs\(`)
	var want []string
	for _, top := range []string{"gateway", "shared"} {
		err := filepath.WalkDir(filepath.Join(repoRoot, top), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if guard.Match(b) {
				rel, _ := filepath.Rel(repoRoot, filepath.Dir(path))
				want = append(want, "./"+rel)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	want = uniq(want)
	var got []string
	for _, p := range packageArgs(allocs) {
		got = append(got, strings.TrimSuffix(p, "/"))
	}
	got = uniq(got)
	if strings.Join(got, " ") != strings.Join(want, " ") || len(want) == 0 {
		t.Errorf("the allocation run tests %v; the packages with a TestXxxAllocs are %v", got, want)
	}
}

// packageArgs is the ./... arguments of a go command line.
func packageArgs(f []string) []string {
	var out []string
	for _, a := range f {
		if strings.HasPrefix(a, "./") {
			out = append(out, a)
		}
	}
	return out
}

func uniq(s []string) []string {
	sort.Strings(s)
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}
