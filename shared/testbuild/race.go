//go:build race

package testbuild

// Race is whether this binary was built with -race.
const Race = true
