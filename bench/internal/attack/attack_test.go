package attack

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A closed loop against a real listener: every request carries the header,
// and the answers are counted by status.
func TestRunCountsStatuses(t *testing.T) {
	var n, keyed atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-API-Key") == "k" {
			keyed.Add(1)
		}
		if n.Add(1)%2 == 0 {
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()
	res, err := Run(context.Background(), Load{URL: srv.URL, Header: http.Header{"X-Api-Key": {"k"}}, Conns: 2, Duration: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests == 0 || res.Errors != 0 || res.Answers() != res.Requests || res.Elapsed <= 0 {
		t.Fatalf("%+v", res)
	}
	if res.Statuses[429] == 0 || res.Outside(200, 399) != res.Statuses[429] || res.Outside(200, 499) != 0 {
		t.Errorf("statuses %v", res.Statuses)
	}
	if keyed.Load() != n.Load() {
		t.Errorf("%d of %d requests carried the header", keyed.Load(), n.Load())
	}
}

// A request nothing answers is an error, not a status.
func TestRunCountsErrors(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	res, err := Run(context.Background(), Load{URL: url, Conns: 1, Rate: 20, Duration: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors == 0 || res.Errors != res.Requests || len(res.Statuses) != 0 || res.FirstError == "" {
		t.Errorf("%+v", res)
	}
}

// Rotate sends each header value in turn: every key of the list arrives.
func TestRunRotates(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Header.Get("X-API-Key")]++
		mu.Unlock()
	}))
	defer srv.Close()
	var hs []http.Header
	for i := 0; i < 20; i++ {
		hs = append(hs, http.Header{"X-Api-Key": {fmt.Sprintf("k%d", i)}})
	}
	res, err := Run(context.Background(), Load{URL: srv.URL, Rotate: hs, Conns: 2, Duration: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if res.Requests < int64(len(hs)) || len(seen) != len(hs) {
		t.Errorf("%d requests, %d distinct keys seen, want all %d: %v", res.Requests, len(seen), len(hs), seen)
	}
}

// URLs and Rotate share one counter, so each URL arrives with its own
// header; OnResult is told every request with its URL, status and times.
func TestRunPairsURLsWithHeadersAndReportsHits(t *testing.T) {
	var mismatched, served atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		if r.URL.Query().Get("k") != r.Header.Get("X-API-Key") {
			mismatched.Add(1)
		}
		if r.URL.Query().Get("k") == "k3" {
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()
	var urls []string
	var hs []http.Header
	for i := 0; i < 5; i++ {
		urls = append(urls, fmt.Sprintf("%s/?k=k%d", srv.URL, i))
		hs = append(hs, http.Header{"X-Api-Key": {fmt.Sprintf("k%d", i)}})
	}
	var hits []Hit
	start := time.Now()
	res, err := Run(context.Background(), Load{URL: srv.URL, URLs: urls, Rotate: hs, Conns: 4, Rate: 200,
		Duration: 300 * time.Millisecond, OnResult: func(h Hit) { hits = append(hits, h) }})
	if err != nil {
		t.Fatal(err)
	}
	if mismatched.Load() != 0 || served.Load() == 0 {
		t.Errorf("%d of %d requests carried another URL's header", mismatched.Load(), served.Load())
	}
	if int64(len(hits)) != res.Requests {
		t.Fatalf("%d hits for %d requests", len(hits), res.Requests)
	}
	for _, h := range hits {
		want := http.StatusOK
		if h.URL == urls[3] {
			want = http.StatusTooManyRequests
		}
		if h.Code != want || h.Sent.Before(start) || h.Latency <= 0 || h.Sent.Add(h.Latency).After(time.Now()) {
			t.Errorf("hit %+v, want status %d, sent after %v, answered by now", h, want, start)
		}
	}
}
