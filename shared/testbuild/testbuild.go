// Package testbuild gives the go build flags for binaries a test builds
// and runs (the gateway, the backend, vendorctl): the test binary's own
// race mode, so that under make test (-race) they are linked from the
// packages the race tests compiled already, and race reports from the
// binaries fail the tests that run them; and no DWARF, as the tests'
// own binaries (a quarter of a link's CPU). Race tells a test whether it
// runs under the race detector (whose allocations the allocation guards
// do not count).
package testbuild

// Flags are the flags to put after "go build".
func Flags() []string {
	if Race {
		return []string{"-race", "-ldflags=-w"}
	}
	return []string{"-ldflags=-w"}
}

// Args are the arguments of "go" that build pkgs into out with Flags.
func Args(out string, pkgs ...string) []string {
	return append(append(append([]string{"build"}, Flags()...), "-o", out), pkgs...)
}
