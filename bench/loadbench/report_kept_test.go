package main

import "testing"

// TestKeptSection: the hand-written profile section of docs/bench.md
// survives a rewrite, from its heading to the end; a document without it
// keeps nothing.
func TestKeptSection(t *testing.T) {
	old := "# Load benchmark\n\n## Results\n\n| table |\n\n" + keptHeading + "\n\nby hand\n"
	if got, want := keptSection(old), "\n"+keptHeading+"\n\nby hand\n"; got != want {
		t.Fatalf("kept %q, want %q", got, want)
	}
	if got := keptSection("# Load benchmark\n\n## Results\n"); got != "" {
		t.Fatalf("kept %q from a document without the section", got)
	}
}
