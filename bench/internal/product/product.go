// Package product finds the vendorgate checkout the bench module belongs to
// (the replace in bench/go.mod) and builds its binaries from it, so that
// the figures are of the source at hand, not of a stale bin/.
package product

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

// Root is the folder of the vendorgate module, as go list resolves it from
// the working directory (anywhere inside bench/).
func Root(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "vendorgate").Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			err = fmt.Errorf("%w: %s", err, strings.TrimSpace(string(exit.Stderr)))
		}
		return "", fmt.Errorf("find the vendorgate module (run from bench/ of the checkout): %w", err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", errors.New("find the vendorgate module: go list named no folder")
	}
	return dir, nil
}

// Build compiles ./cmd/NAME of the module at root into dir/NAME for each
// name, with plain flags so that it reuses the build cache of go build
// and go test (the SQLite driver alone takes minutes to compile afresh on
// 2 cores).
func Build(ctx context.Context, root, dir string, names ...string) error {
	for _, b := range names {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, b), "./cmd/"+b)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build ./cmd/%s: %w\n%s", b, err, out)
		}
	}
	return nil
}

// Path is p inside the checkout at root, unless p is absolute: the tools
// write docs/*.md of the checkout from wherever they run.
func Path(root, p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(root, p)
}
