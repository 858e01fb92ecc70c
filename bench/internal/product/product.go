// Package product finds the vendorgate checkout the bench module belongs to
// (the replace in bench/go.mod) and builds its binaries from it, so that
// the figures are of the source at hand, not of a stale bin/.
package product

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"vendorgate/shared/testbuild"
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
// 2 cores). In a race-built test (make test), it builds them as the
// root module's tests do (testbuild.Flags: -race), from the packages
// make test compiled with -race already: built plainly there, the
// backend's dependencies were compiled a second time without -race (56
// packages, about 60 CPU-seconds of a run from empty caches), and with
// testbuild.Build, which links each binary once for all the test
// packages of a make test run.
func Build(ctx context.Context, root, dir string, names ...string) error {
	if testbuild.Race {
		pkgs := make([]string, len(names))
		for i, b := range names {
			pkgs[i] = "./cmd/" + b
		}
		return testbuild.Build(root, dir, testbuild.Flags(), pkgs...)
	}
	return build(ctx, root, dir, nil, names)
}

func build(ctx context.Context, root, dir string, flags []string, names []string) error {
	for _, b := range names {
		args := append(append([]string{"build"}, flags...), "-o", filepath.Join(dir, b), "./cmd/"+b)
		cmd := exec.CommandContext(ctx, "go", args...)
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

// BuildAt compiles ./cmd/NAME of the commit rev (any git revision of the
// checkout at root) into dir/NAME for each name: the commit's tree is
// exported into a folder under dir, so the work tree is left as it is. It
// returns the full commit id rev named.
func BuildAt(ctx context.Context, root, dir, rev string, names ...string) (string, error) {
	src := filepath.Join(dir, "src")
	commit, err := Export(ctx, root, rev, src)
	if err != nil {
		return "", err
	}
	// -trimpath keeps the folder out of the build's cache keys, so the
	// packages the commit shares with an earlier build (make build uses
	// -trimpath too) are not compiled again.
	return commit, build(ctx, src, dir, []string{"-trimpath"}, names)
}

// Export writes the tree of the commit rev of the checkout at root into
// the folder dst (git archive), and returns the full commit id.
func Export(ctx context.Context, root, rev, dst string) (string, error) {
	out, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "--verify", "--quiet", rev+"^{commit}").Output()
	if err != nil {
		return "", fmt.Errorf("git rev-parse %s: not a commit of %s", rev, root)
	}
	commit := strings.TrimSpace(string(out))
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return "", err
	}
	archive := exec.CommandContext(ctx, "git", "-C", root, "archive", "--format=tar", commit)
	extract := exec.CommandContext(ctx, "tar", "-x", "-C", dst)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return "", err
	}
	extract.Stdin = pipe
	var stderr strings.Builder
	archive.Stderr, extract.Stderr = &stderr, &stderr
	if err := extract.Start(); err != nil {
		return "", fmt.Errorf("tar: %w", err)
	}
	if err := archive.Run(); err != nil {
		_ = extract.Wait()
		return "", fmt.Errorf("git archive %s: %w: %s", rev, err, stderr.String())
	}
	if err := extract.Wait(); err != nil {
		return "", fmt.Errorf("extract %s: %w: %s", rev, err, stderr.String())
	}
	return commit, nil
}
