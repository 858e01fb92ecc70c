package main

import (
	"os"
	"path/filepath"
	"regexp"
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
	p := filepath.Join(t.TempDir(), "bench-history.md")
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

// TestMakeSweepWritesAPageWithMarkers: the page `make sweep-redis` hands to
// -write holds the markers writeSection needs, once each and in order, so
// that moving the sweep's table to another page (it lives in the
// benchmark history) fails here, not after a sweep of several minutes.
func TestMakeSweepWritesAPageWithMarkers(t *testing.T) {
	root := filepath.Join("..", "..")
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`run \./redisrule -write (\S+)`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("the Makefile runs no ./redisrule -write")
	}
	page := string(m[1])
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(page)))
	if err != nil {
		t.Fatalf("make sweep-redis writes %s: %v", page, err)
	}
	s := string(b)
	if strings.Count(s, beginMarker) != 1 || strings.Count(s, endMarker) != 1 || strings.Index(s, beginMarker) > strings.Index(s, endMarker) {
		t.Fatalf("make sweep-redis writes %s, which holds %d begin and %d end markers (want one each, begin first)",
			page, strings.Count(s, beginMarker), strings.Count(s, endMarker))
	}
}
