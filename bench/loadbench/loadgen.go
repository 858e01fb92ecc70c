package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"vendorgate/bench/internal/wrk"
)

// measurement is one load run against one row at one connection count.
type measurement struct {
	Requests int64
	Elapsed  time.Duration
	// RPS counts 2xx answers only: a row failing fast (a 503 from an open
	// breaker) must not look faster for it.
	RPS  float64
	P50  time.Duration
	P99  time.Duration
	P999 time.Duration
	// Failed counts socket errors, timeouts and answers other than 2xx: a
	// row that fails requests is not measuring what it claims. FailedDetail
	// says which.
	Failed       int64
	FailedDetail string
}

// loadGenerator drives closed-loop load: conns connections, each sending
// the next request as soon as the previous answer arrived, for d.
type loadGenerator interface {
	name() string
	run(url, apiKey string, conns int, d time.Duration) (measurement, error)
}

// wrkGen is wrk with one thread by default: on a 2-core machine one core
// drives the load, the other serves it.
type wrkGen struct {
	runner  *wrk.Runner
	threads int
}

func (w *wrkGen) name() string { return fmt.Sprintf("wrk -t%d", w.threads) }

func (w *wrkGen) run(url, apiKey string, conns int, d time.Duration) (measurement, error) {
	s, err := w.runner.Run(context.Background(), wrk.Load{URL: url, Header: "X-API-Key: " + apiKey,
		Threads: w.threads, Conns: conns, Duration: d})
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

func (vegetaGen) run(url, apiKey string, conns int, d time.Duration) (measurement, error) {
	return vegetaAttack(url, apiKey, conns, vegeta.Rate{}, d)
}

// attackRate sends rate requests per second whatever the latency, which is
// how latency at a given load must be measured (a closed loop slows down
// with the server and hides its queueing).
func attackRate(url, apiKey string, rate int, d time.Duration) (measurement, error) {
	return vegetaAttack(url, apiKey, 256, vegeta.Rate{Freq: rate, Per: time.Second}, d)
}

func vegetaAttack(url, apiKey string, conns int, rate vegeta.Rate, d time.Duration) (measurement, error) {
	// The generator's own garbage collection shows up in the tail of every
	// row it measures: collect rarely while attacking (this process only;
	// the processes under test keep their settings).
	defer debug.SetGCPercent(debug.SetGCPercent(1000))
	opts := []func(*vegeta.Attacker){
		vegeta.Connections(conns), vegeta.MaxConnections(conns),
		vegeta.KeepAlive(true), vegeta.HTTP2(false), vegeta.Timeout(5 * time.Second),
	}
	if rate.Freq == 0 {
		opts = append(opts, vegeta.Workers(uint64(conns)), vegeta.MaxWorkers(uint64(conns)))
	} else {
		opts = append(opts, vegeta.Workers(uint64(min(conns, 32))), vegeta.MaxWorkers(uint64(conns)))
	}
	atk := vegeta.NewAttacker(opts...)
	tgt := vegeta.NewStaticTargeter(vegeta.Target{Method: http.MethodGet, URL: url,
		Header: http.Header{"X-API-Key": []string{apiKey}}})
	var m vegeta.Metrics
	var failed int64
	kinds := map[string]int{}
	for res := range atk.Attack(tgt, rate, d, "loadbench") {
		if res.Error != "" || res.Code < 200 || res.Code > 299 {
			failed++
			if res.Error != "" {
				kinds["error"]++
			} else {
				kinds["status "+strconv.Itoa(int(res.Code))]++
			}
		}
		m.Add(res)
	}
	m.Close()
	if m.Requests == 0 {
		return measurement{}, errors.New("vegeta sent no request")
	}
	elapsed := m.Duration + m.Wait
	out := measurement{
		Requests: int64(m.Requests),
		Elapsed:  elapsed,
		RPS:      float64(int64(m.Requests)-failed) / elapsed.Seconds(),
		P50:      m.Latencies.P50,
		P99:      m.Latencies.P99,
		P999:     m.Latencies.Quantile(0.999),
		Failed:   failed,
	}
	var detail []string
	for k, n := range kinds {
		detail = append(detail, fmt.Sprintf("%s: %d", k, n))
	}
	sort.Strings(detail)
	out.FailedDetail = strings.Join(detail, ", ")
	if len(m.Errors) > 0 {
		out.FailedDetail += "; first error: " + m.Errors[0]
	}
	return out, nil
}
