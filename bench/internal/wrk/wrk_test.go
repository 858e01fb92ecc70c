package wrk

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	out := "Running 2s test @ http://127.0.0.1:1/api/vendor/v1/me\n  1 threads and 16 connections\n" +
		"  WRKSUMMARY requests=100000 duration_us=2000000 p50_us=210 p99_us=900 p999_us=2500 connect=0 read=1 write=0 status=3 timeout=2\n"
	s, err := Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	if s.RPS() != 49998.5 || s.P50 != 210*time.Microsecond || s.P99 != 900*time.Microsecond ||
		s.P999 != 2500*time.Microsecond || s.Errors() != 3 || s.Status != 3 {
		t.Errorf("parsed %+v rps %v", s, s.RPS())
	}
	if got := s.Failures(); got != "read errors 1, status errors 3, timeout errors 2" {
		t.Errorf("Failures() = %q", got)
	}
	for _, bad := range []string{"", "Running 2s test\n", "WRKSUMMARY requests=x duration_us=1",
		"WRKSUMMARY requests=1", "OTHER duration_us=5"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

// TestRun drives a real listener with the real wrk and reads the script's
// line back: the script and the parser agree.
func TestRun(t *testing.T) {
	if _, err := exec.LookPath("wrk"); err != nil {
		t.Skip("wrk not installed (apt-get install -y wrk)")
	}
	var sawKey atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-API-Key") == "k" {
			sawKey.Store(true)
		}
		if r.URL.Path == "/limited" {
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()
	r, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s, err := r.Run(context.Background(), Load{URL: srv.URL + "/limited", Header: "X-API-Key: k", Conns: 2, Duration: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if s.Requests == 0 || s.Status != s.Requests || s.RPS() != 0 || s.Elapsed <= 0 {
		t.Errorf("every answer a 429: %+v", s)
	}
	if !sawKey.Load() {
		t.Error("the header did not reach the server")
	}
}

// TestRunRotate sends every value of the file, in turn, as the header:
// each key of a many-vendor load is used, none is left out.
func TestRunRotate(t *testing.T) {
	if _, err := exec.LookPath("wrk"); err != nil {
		t.Skip("wrk not installed (apt-get install -y wrk)")
	}
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Header.Get("X-API-Key")]++
		mu.Unlock()
	}))
	defer srv.Close()
	dir := t.TempDir()
	var keys []string
	for i := 0; i < 50; i++ {
		keys = append(keys, fmt.Sprintf("key-%02d", i))
	}
	file := filepath.Join(dir, "keys.txt")
	if err := os.WriteFile(file, []byte(strings.Join(keys, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := r.Run(context.Background(), Load{URL: srv.URL, Rotate: &Rotation{Header: "X-API-Key", File: file},
		Conns: 2, Duration: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if s.Requests < int64(len(keys)) || s.Status != 0 {
		t.Fatalf("summary %+v: want at least %d answers, all 2xx", s, len(keys))
	}
	for _, k := range keys {
		if seen[k] == 0 {
			t.Errorf("key %q never sent (seen %v)", k, seen)
		}
	}
	if len(seen) != len(keys) {
		t.Errorf("%d distinct header values, want %d: %v", len(seen), len(keys), seen)
	}
}
