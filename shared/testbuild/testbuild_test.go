package testbuild

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// module writes a module of one main package, hello, that prints says.
func module(t *testing.T, dir, says string) {
	t.Helper()
	files := map[string]string{
		"go.mod":        "module example.com/m\n\ngo 1.22\n",
		"hello/main.go": "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Print(" + `"` + says + `"` + ") }\n",
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func run(t *testing.T, bin string) string {
	t.Helper()
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
	return string(out)
}

// Under make test, the second package to build a binary gets the file the
// first one linked (into a folder Build makes, as go build -o does); a build of other sources links anew, and a binary
// handed out before keeps what it was.
func TestBuildSharesTheLink(t *testing.T) {
	t.Setenv(SharedEnv, t.TempDir())
	src, a, b, c := t.TempDir(), t.TempDir(), filepath.Join(t.TempDir(), "new"), t.TempDir()
	module(t, src, "one")
	for _, out := range []string{a, b} {
		if err := Build(src, out, Flags(), "./hello"); err != nil {
			t.Fatal(err)
		}
	}
	fa, err := os.Stat(filepath.Join(a, "hello"))
	if err != nil {
		t.Fatal(err)
	}
	fb, err := os.Stat(filepath.Join(b, "hello"))
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(fa, fb) {
		t.Error("the second build's binary is a file of its own: it was linked again")
	}

	module(t, src, "two")
	if err := Build(src, c, Flags(), "./hello"); err != nil {
		t.Fatal(err)
	}
	if got := run(t, filepath.Join(c, "hello")); got != "two" {
		t.Errorf("after the source changed, the binary says %q, want two", got)
	}
	if got := run(t, filepath.Join(a, "hello")); got != "one" {
		t.Errorf("the binary built first now says %q, want one", got)
	}
}

// Without the shared folder, Build builds into out, and a failed build
// says why.
func TestBuildAlone(t *testing.T) {
	t.Setenv(SharedEnv, "")
	src, out := t.TempDir(), filepath.Join(t.TempDir(), "new")
	module(t, src, "alone")
	if err := Build(src, out, Flags(), "./hello"); err != nil {
		t.Fatal(err)
	}
	if got := run(t, filepath.Join(out, "hello")); got != "alone" {
		t.Errorf("the binary says %q, want alone", got)
	}
	err := Build(src, out, Flags(), "./missing")
	if err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("a build of a missing package: %v, want its go build error", err)
	}
}
