package product

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// Root is the product's folder, the parent of bench/, not bench's own
// module; Build makes a binary there.
func TestRootAndBuild(t *testing.T) {
	root, err := Root(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "cmd", "gateway", "main.go")); err != nil {
		t.Fatalf("root %s holds no cmd/gateway: %v", root, err)
	}
	if _, err := os.Stat(filepath.Join(root, "bench", "go.mod")); err != nil {
		t.Fatalf("root %s holds no bench/go.mod: %v", root, err)
	}
	dir := t.TempDir()
	if err := Build(context.Background(), root, dir, "vendorctl"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "vendorctl")); err != nil {
		t.Fatal(err)
	}
	if got := Path(root, "docs/bench.md"); got != filepath.Join(root, "docs", "bench.md") {
		t.Errorf("Path = %q", got)
	}
	if got := Path(root, "/tmp/x.md"); got != "/tmp/x.md" {
		t.Errorf("Path kept no absolute path: %q", got)
	}
}

// Export writes a commit's tree, not the work tree: the files git tracks
// at that commit, and nothing untracked. (BuildAt is Export and then the
// build TestRootAndBuild checks; building a whole commit here would take
// minutes on 2 cores.)
func TestExport(t *testing.T) {
	root, err := Root(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	commit, err := Export(context.Background(), root, "HEAD", dst)
	if err != nil {
		t.Fatal(err)
	}
	if len(commit) != 40 {
		t.Errorf("commit = %q, want a full commit id", commit)
	}
	for _, f := range []string{"go.mod", filepath.Join("cmd", "gateway", "main.go")} {
		if _, err := os.Stat(filepath.Join(dst, f)); err != nil {
			t.Errorf("exported tree lacks %s: %v", f, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dst, "bin")); err == nil {
		t.Error("exported tree holds bin/, which git does not track")
	}
	if _, err := Export(context.Background(), root, "no-such-revision-xyz", t.TempDir()); err == nil {
		t.Error("Export of a revision that does not exist: no error")
	}
}
