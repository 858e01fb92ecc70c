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
