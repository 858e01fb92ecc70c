package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAnswerKinds: the codes the sweep counts apart.
func TestAnswerKinds(t *testing.T) {
	for _, c := range []struct {
		status int
		body   string
		want   string
	}{
		{200, `{"vendor_id":"x"}`, kindOK},
		{429, `{"error":{"code":"rate_limited","message":"x"}}`, kindLimited},
		{503, `{"error":{"code":"rate_limit_unavailable","message":"x"}}`, kindUnavailable},
		{503, `{"error":{"code":"request_failed","message":"x"}}`, kindShed},
		{502, `{"error":{"code":"request_failed","message":"x"}}`, kindOther},
		{0, ``, kindOther},
	} {
		if got := (answer{status: c.status, code: errorCode([]byte(c.body))}).kind(); got != c.want {
			t.Errorf("%d %s: %s, want %s", c.status, c.body, got, c.want)
		}
	}
}

// TestWriteSection replaces only what lies between the markers.
func TestWriteSection(t *testing.T) {
	p := filepath.Join(t.TempDir(), "limits.md")
	doc := "# T\n\nbefore\n\n" + beginMarker + "\nold table\n" + endMarker + "\n\nafter\n"
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeSection(p, "new table\n"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	want := "# T\n\nbefore\n\n" + beginMarker + "\nnew table\n" + endMarker + "\n\nafter\n"
	if string(b) != want {
		t.Fatalf("got\n%s\nwant\n%s", b, want)
	}
	if err := os.WriteFile(p, []byte("no markers"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeSection(p, "x"); err == nil || !strings.Contains(err.Error(), "markers") {
		t.Fatalf("a file without markers: %v", err)
	}
}
