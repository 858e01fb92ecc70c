package wrk

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os/exec"
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
