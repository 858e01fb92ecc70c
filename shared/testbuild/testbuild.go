// Package testbuild builds the binaries a test runs (the gateway, the
// backend, vendorctl). Flags are the test binary's own race mode, so that
// under make test (-race) they are linked from the packages the race
// tests compiled already, and race reports from the binaries fail the
// tests that run them; and no DWARF, as the tests' own binaries (a
// quarter of a link's CPU). Build shares each link among the test
// packages of one make test run. Race tells a test whether it runs under
// the race detector (whose allocations the allocation guards do not
// count).
package testbuild

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Flags are the flags to put after "go build".
func Flags() []string {
	if Race {
		return []string{"-race", "-ldflags=-w"}
	}
	return []string{"-ldflags=-w"}
}

// SharedEnv is the environment variable that names a directory the test
// packages' builds share (Build); make test sets it for its run.
const SharedEnv = "VENDORGATE_TEST_BIN"

// Build builds the main packages pkgs (as go build names them from the
// directory dir: "./cmd/gateway", ".") with flags into the directory out,
// each binary named for its package's folder.
//
// Where SharedEnv names a directory, the binaries are linked there, in a
// folder for the flags, and hard-linked into out: go build does not link
// a binary again whose file there has the build ID it would produce (the
// same sources and flags), and links anew over one of other sources, so
// the gateway that five test packages run is linked once a run (about 5
// CPU-seconds a link under -race). A binary a test is running keeps its
// file when another build replaces the shared one (go build renames the
// new file into place).
func Build(dir, out string, flags []string, pkgs ...string) error {
	shared := os.Getenv(SharedEnv)
	if shared == "" {
		return goBuild(dir, out, flags, pkgs)
	}
	sum := sha256.Sum256([]byte(strings.Join(flags, "\x00")))
	into := filepath.Join(shared, hex.EncodeToString(sum[:8]))
	for _, d := range []string{into, out} { // go build -o makes the folder too
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := goBuild(dir, into, flags, pkgs); err != nil {
		return err
	}
	for _, p := range pkgs {
		abs, err := filepath.Abs(filepath.Join(dir, p))
		if err != nil {
			return err
		}
		name := filepath.Base(abs)
		if err := linkOrCopy(filepath.Join(into, name), filepath.Join(out, name)); err != nil {
			return fmt.Errorf("binary %s: %w", name, err)
		}
	}
	return nil
}

func goBuild(dir, out string, flags, pkgs []string) error {
	args := append(append(append([]string{"build"}, flags...), "-o", out+string(filepath.Separator)), pkgs...)
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, b)
	}
	return nil
}

// linkOrCopy puts the file src at dst: a hard link, or a copy where the
// two are on different file systems.
func linkOrCopy(src, dst string) error {
	if err := os.Remove(dst); err != nil && !os.IsNotExist(err) {
		return err
	}
	if os.Link(src, dst) == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	o, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(o, in); err != nil {
		o.Close()
		return err
	}
	return o.Close()
}
