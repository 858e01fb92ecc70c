package main

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"vendorgate/bench/internal/attack"
	"vendorgate/bench/internal/wrk"
)

// measurement is one load run against one row at one connection count.
type measurement struct {
	Requests int64
	Elapsed  time.Duration
	// RPS counts 2xx answers only: a row failing fast (a 503 from an open
	// breaker) must not look faster for it.
	RPS float64
	// OK counts the 2xx answers.
	OK   int64
	P50  time.Duration
	P99  time.Duration
	P999 time.Duration
	// Failed counts socket errors, timeouts and answers other than 2xx: a
	// row that fails requests is not measuring what it claims. FailedDetail
	// says which.
	Failed       int64
	FailedDetail string
	// ProxyCPU and RedisCPU are the CPU time the row's processes and its
	// Redis spent over the run, Scripts the script calls Redis ran; CPUOK
	// says whether the CPU times were read.
	ProxyCPU, RedisCPU time.Duration
	Scripts            int64
	// RedisCommands counts every command Redis ran, a script's own too.
	RedisCommands int64
	CPUOK         bool
	// Wall is the time between the two CPU readings (-tls: the idle CPU
	// over it is subtracted).
	Wall time.Duration
	// Syscalls counts the server's read and write system calls over the
	// run (-tls).
	Syscalls int64
	// Leases is what the gateway's lease counters moved over the run.
	Leases leaseCounts
}

// keySet is the API keys of one load: one key, or many sent round robin.
type keySet struct {
	name string
	keys []string
	file string // the keys, one a line (wrk reads it)
}

// header is the header line of a one-key set.
func (k *keySet) header() string { return "X-API-Key: " + k.keys[0] }

// loadGenerator drives closed-loop load: conns connections, each sending
// the next request as soon as the previous answer arrived, for d.
type loadGenerator interface {
	name() string
	run(url string, keys *keySet, conns int, d time.Duration) (measurement, error)
}

// wrkGen is wrk with one thread by default: on a 2-core machine one core
// drives the load, the other serves it.
type wrkGen struct {
	runner  *wrk.Runner
	threads int
}

func (w *wrkGen) name() string { return fmt.Sprintf("wrk -t%d", w.threads) }

func (w *wrkGen) run(url string, keys *keySet, conns int, d time.Duration) (measurement, error) {
	l := wrk.Load{URL: url, Threads: w.threads, Conns: conns, Duration: d}
	if len(keys.keys) == 1 {
		l.Header = keys.header()
	} else {
		l.Rotate = &wrk.Rotation{Header: "X-API-Key", File: keys.file}
	}
	s, err := w.runner.Run(context.Background(), l)
	if err != nil {
		return measurement{}, err
	}
	return fromWrk(s), nil
}

// fromWrk is a measurement of wrk's summary: every error and non-2xx
// answer counts as failed.
func fromWrk(s wrk.Summary) measurement {
	return measurement{
		Requests:     s.Requests,
		Elapsed:      s.Elapsed,
		RPS:          s.RPS(),
		OK:           s.Requests - s.Status,
		P50:          s.P50,
		P99:          s.P99,
		P999:         s.P999,
		Failed:       s.Errors() + s.Status,
		FailedDetail: s.Failures(),
	}
}

// vegetaGen is vegeta used as a library: closed loop with one worker per
// connection (rate 0), or open loop at a constant rate (attackRate). It
// needs no external package, so the smoke test can always run it.
type vegetaGen struct{}

func (vegetaGen) name() string { return "vegeta (library)" }

func (vegetaGen) run(url string, keys *keySet, conns int, d time.Duration) (measurement, error) {
	l := attack.Load{URL: url, Conns: conns, Duration: d}
	if len(keys.keys) == 1 {
		l.Header = http.Header{"X-API-Key": keys.keys[:1]}
	} else {
		l.Rotate = make([]http.Header, len(keys.keys))
		for i, k := range keys.keys {
			l.Rotate[i] = http.Header{"X-API-Key": []string{k}}
		}
	}
	res, err := attack.Run(context.Background(), l)
	if err != nil {
		return measurement{}, err
	}
	return fromAttack(res), nil
}

// attackRate sends rate requests per second whatever the latency, which is
// how latency at a given load must be measured (a closed loop slows down
// with the server and hides its queueing).
func attackRate(url, apiKey string, rate int, d time.Duration) (measurement, error) {
	res, err := attack.Run(context.Background(), attack.Load{URL: url, Header: http.Header{"X-API-Key": []string{apiKey}},
		Conns: 256, Rate: rate, Duration: d})
	if err != nil {
		return measurement{}, err
	}
	return fromAttack(res), nil
}

// fromAttack is a measurement of a vegeta run: requests without an answer
// and answers outside 2xx count as failed.
func fromAttack(res attack.Result) measurement {
	failed := res.Errors + res.Outside(200, 299)
	out := measurement{
		Requests: res.Requests,
		Elapsed:  res.Elapsed,
		RPS:      float64(res.Requests-failed) / res.Elapsed.Seconds(),
		OK:       res.Requests - failed,
		P50:      res.P50,
		P99:      res.P99,
		P999:     res.P999,
		Failed:   failed,
	}
	var detail []string
	if res.Errors > 0 {
		detail = append(detail, fmt.Sprintf("error: %d", res.Errors))
	}
	for code, n := range res.Statuses {
		detail = append(detail, fmt.Sprintf("status %d: %d", code, n))
	}
	sort.Strings(detail)
	out.FailedDetail = strings.Join(detail, ", ")
	if res.FirstError != "" {
		out.FailedDetail += "; first error: " + res.FirstError
	}
	return out
}
