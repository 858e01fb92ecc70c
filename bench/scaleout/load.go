package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"sync"
	"time"

	"vendorgate/bench/internal/attack"
	"vendorgate/bench/internal/wrk"
)

// throughput is one wrk run against one gateway.
type throughput struct {
	gateway  string
	requests int64         // every answer
	non2xx   int64         // answers outside 2xx/3xx
	errors   int64         // connect, read, write errors and timeouts
	elapsed  time.Duration // wrk's own measured duration
	p50, p99 time.Duration
}

// rps counts 2xx answers only: a fast 429 or 503 is not throughput.
func (t throughput) rps() float64 {
	if t.elapsed <= 0 {
		return 0
	}
	return float64(t.requests-t.non2xx) / t.elapsed.Seconds()
}

// runWrk runs one wrk process per gateway at the same moment, each with
// one thread and conns connections for d, all reading GET /me with key.
func runWrk(ctx context.Context, dir string, gateways []string, key string, conns int, d time.Duration) ([]throughput, error) {
	if _, err := exec.LookPath("wrk"); err != nil {
		return runVegeta(ctx, gateways, key, conns, d)
	}
	r, err := wrk.New(dir)
	if err != nil {
		return nil, err
	}
	out := make([]throughput, len(gateways))
	errs := make([]error, len(gateways))
	var wg sync.WaitGroup
	for i, gw := range gateways {
		wg.Go(func() {
			s, err := r.Run(ctx, wrk.Load{URL: gw + "/api/vendor/v1/me", Header: "X-API-Key: " + key, Threads: 1, Conns: conns, Duration: d})
			out[i], errs[i] = fromWrk(fmt.Sprintf("gateway-%d", i+1), s), err
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// fromWrk is one gateway's throughput of wrk's summary.
func fromWrk(gateway string, s wrk.Summary) throughput {
	return throughput{gateway: gateway, requests: s.Requests, non2xx: s.Status, errors: s.Errors(),
		elapsed: s.Elapsed, p50: s.P50, p99: s.P99}
}

// exactness is the limit-exactness run: one vendor on the default read
// limit, both gateways hammered at once.
type exactness struct {
	rate     int
	period   time.Duration
	admitted int // 200
	limited  int // 429
	other    map[int]int
	failed   int // transport errors
	// elapsed runs from the first request sent to the last answer read;
	// inner from the first answer read to the last request sent.
	elapsed, inner time.Duration
}

// interval is GCRA's emission interval: one request per period/rate.
func (e exactness) interval() time.Duration { return e.period / time.Duration(e.rate) }

// budget is the most a limit of rate per period with burst rate can admit
// over the run: the burst plus one per emission interval elapsed.
func (e exactness) budget() int { return e.rate + int(e.elapsed/e.interval()) }

// floor is the least it admits under continuous load: every interval that
// passed between the first answer and the last request sent was used.
func (e exactness) floor() int { return e.rate + int(e.inner/e.interval()) }

// exact says the admitted count is what the limit allows, neither more
// (the limit leaked across gateways) nor less (a refusal it should not
// have made), and nothing but 200 and 429 was answered.
func (e exactness) exact() bool {
	return e.admitted >= e.floor() && e.admitted <= e.budget() && len(e.other) == 0 && e.failed == 0
}

// hammer sends GET /me with key from workers goroutines per gateway, all
// gateways at once, for d.
func hammer(ctx context.Context, gateways []string, key string, workers int, d time.Duration, rate int, period time.Duration) exactness {
	tr := &http.Transport{MaxIdleConnsPerHost: workers, MaxConnsPerHost: workers}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	var (
		mu                    sync.Mutex
		res                   = exactness{rate: rate, period: period, other: map[int]int{}}
		firstAnswer, lastSent time.Time
		wg                    sync.WaitGroup
	)
	start := time.Now()
	stopAt := start.Add(d)
	for _, gw := range gateways {
		for range workers {
			wg.Go(func() {
				for ctx.Err() == nil {
					sent := time.Now()
					if sent.After(stopAt) {
						return
					}
					req, _ := http.NewRequestWithContext(ctx, "GET", gw+"/api/vendor/v1/me", nil)
					req.Header.Set("X-API-Key", key)
					resp, err := client.Do(req)
					status := 0
					if err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						status = resp.StatusCode
					}
					answered := time.Now()
					mu.Lock()
					if sent.After(lastSent) {
						lastSent = sent
					}
					if firstAnswer.IsZero() || answered.Before(firstAnswer) {
						firstAnswer = answered
					}
					switch {
					case err != nil:
						res.failed++
					case status == 200:
						res.admitted++
					case status == 429:
						res.limited++
					default:
						res.other[status]++
					}
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.inner = max(lastSent.Sub(firstAnswer), 0)
	return res
}

// runVegeta is the load generator where wrk is not installed: vegeta as a
// library, closed loop, one worker per connection, both gateways at once.
func runVegeta(ctx context.Context, gateways []string, key string, conns int, d time.Duration) ([]throughput, error) {
	out := make([]throughput, len(gateways))
	errs := make([]error, len(gateways))
	var wg sync.WaitGroup
	for i, gw := range gateways {
		wg.Go(func() {
			res, err := attack.Run(ctx, attack.Load{URL: gw + "/api/vendor/v1/me",
				Header: http.Header{"X-API-Key": []string{key}}, Conns: conns, Duration: d})
			// As with wrk: requests are the answers, transport errors apart.
			out[i] = throughput{gateway: fmt.Sprintf("gateway-%d", i+1), requests: res.Answers(), errors: res.Errors,
				non2xx: res.Outside(200, 399), elapsed: res.Elapsed, p50: res.P50, p99: res.P99}
			errs[i] = err
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// loadGenerator names what runWrk will use.
func loadGenerator() string {
	if _, err := exec.LookPath("wrk"); err != nil {
		return "vegeta v12 (library; wrk not installed)"
	}
	return ""
}
