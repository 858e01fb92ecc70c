package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sort"
	"sync"
	"time"
)

// answer is one request's outcome, its start and end since the cell's start.
type answer struct {
	status     int
	code       string // the error code of a JSON error body
	start, end time.Duration
}

// Answer kinds.
const (
	kindOK          = "200"
	kindLimited     = "429"
	kindUnavailable = "503 rate_limit_unavailable"
	kindShed        = "503 shed"
	kindOther       = "other"
)

func (a answer) kind() string {
	switch {
	case a.status == http.StatusOK:
		return kindOK
	case a.status == http.StatusTooManyRequests:
		return kindLimited
	case a.status == http.StatusServiceUnavailable && a.code == "rate_limit_unavailable":
		return kindUnavailable
	case a.status == http.StatusServiceUnavailable:
		return kindShed
	}
	return kindOther
}

// errorCode is the code of a body {"error":{"code":"...", ...}}.
func errorCode(body []byte) string {
	const key = `"code":"`
	i := bytes.Index(body, []byte(key))
	if i < 0 {
		return ""
	}
	rest := body[i+len(key):]
	if j := bytes.IndexByte(rest, '"'); j >= 0 {
		return string(rest[:j])
	}
	return ""
}

// offer runs workers closed-loop requests (each the next as soon as its
// answer came) against url until ctx ends, each worker with the key of
// its own vendor (worker w: keys[w % len(keys)]), and returns every
// answer. A request without an answer (a transport error) has status 0.
func offer(ctx context.Context, url string, keys []string, workers int, t0 time.Time) []answer {
	tr := &http.Transport{MaxIdleConnsPerHost: workers, MaxConnsPerHost: workers, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	var mu sync.Mutex
	var all []answer
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(key string) {
			defer wg.Done()
			var mine []answer
			for ctx.Err() == nil {
				start := time.Since(t0)
				req, _ := http.NewRequest(http.MethodGet, url, nil)
				req.Header.Set("X-API-Key", key)
				a := answer{start: start}
				if resp, err := client.Do(req); err == nil {
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					a.status, a.code = resp.StatusCode, errorCode(body)
				}
				a.end = time.Since(t0)
				mine = append(mine, a)
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		}(keys[w%len(keys)])
	}
	wg.Wait()
	sort.Slice(all, func(i, j int) bool { return all[i].end < all[j].end })
	return all
}
