// Package attack drives load with vegeta as a library: the generator where
// wrk is not installed, and the one that holds a constant rate (a closed
// loop slows down with the server and hides its queueing; wrk2 is not
// packaged).
package attack

import (
	"context"
	"errors"
	"net/http"
	"runtime/debug"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// Load is one run of GETs.
type Load struct {
	URL    string
	Header http.Header
	// Rotate, when not empty, replaces Header: request i carries
	// Rotate[i % len(Rotate)] (many API keys, each its own vendor).
	Rotate []http.Header
	// URLs, when not empty, replaces URL the same way: request i goes to
	// URLs[i % len(URLs)], with Rotate[i % len(Rotate)] when both are set
	// (one counter, so a URL can name the key it was sent with).
	URLs  []string
	Conns int
	// Rate is requests per second whatever the latency; 0 runs a closed
	// loop, one worker per connection sending the next request as soon as
	// the previous answer arrived.
	Rate     int
	Duration time.Duration
	// OnResult, when not nil, is given every request's outcome as it
	// arrives, from one goroutine.
	OnResult func(Hit)
}

// Hit is one request's outcome.
type Hit struct {
	URL string
	// Code is the answer's status, 0 when there was none (an error).
	Code int
	// Sent is when the request was sent, Latency how long its answer took:
	// Sent + Latency is when the answer had arrived.
	Sent    time.Time
	Latency time.Duration
}

// Result is what one run got back.
type Result struct {
	Requests int64 // requests sent, answered or not
	Errors   int64 // requests without an answer (connect, read, timeout)
	// Statuses counts the answers outside 2xx by status.
	Statuses   map[int]int64
	Elapsed    time.Duration // first request sent to last answer read
	P50        time.Duration
	P99        time.Duration
	P999       time.Duration
	FirstError string // vegeta's first error text, "" when none
}

// Answers is the requests that got an answer, whatever its status.
func (r Result) Answers() int64 { return r.Requests - r.Errors }

// Outside counts the answers whose status is outside [lo, hi].
func (r Result) Outside(lo, hi int) int64 {
	var n int64
	for code, c := range r.Statuses {
		if code < lo || code > hi {
			n += c
		}
	}
	return n
}

// Run attacks l.URL until l.Duration has passed or ctx ends.
func Run(ctx context.Context, l Load) (Result, error) {
	// The generator's own garbage collection shows up in the tail of every
	// run it measures: collect rarely while attacking (this process only;
	// the processes under test keep their settings).
	defer debug.SetGCPercent(debug.SetGCPercent(1000))
	opts := []func(*vegeta.Attacker){
		vegeta.Connections(l.Conns), vegeta.MaxConnections(l.Conns),
		vegeta.KeepAlive(true), vegeta.HTTP2(false), vegeta.Timeout(5 * time.Second),
		vegeta.MaxWorkers(uint64(l.Conns)),
	}
	rate := vegeta.Rate{Freq: l.Rate, Per: time.Second}
	if l.Rate == 0 {
		rate = vegeta.Rate{}
		opts = append(opts, vegeta.Workers(uint64(l.Conns)))
	} else {
		opts = append(opts, vegeta.Workers(uint64(min(l.Conns, 32))))
	}
	atk := vegeta.NewAttacker(opts...)
	tgt := vegeta.NewStaticTargeter(vegeta.Target{Method: http.MethodGet, URL: l.URL, Header: l.Header})
	if len(l.Rotate) > 0 || len(l.URLs) > 0 {
		tgt = rotating(l.URL, l.URLs, l.Rotate, l.Header)
	}
	var m vegeta.Metrics
	out := Result{Statuses: map[int]int64{}}
	for res := range atk.Attack(tgt, rate, l.Duration, "bench") {
		switch {
		case res.Code == 0:
			out.Errors++
		case res.Code < 200 || res.Code > 299:
			out.Statuses[int(res.Code)]++
		}
		m.Add(res)
		if l.OnResult != nil {
			l.OnResult(Hit{URL: res.URL, Code: int(res.Code), Sent: res.Timestamp, Latency: res.Latency})
		}
		if ctx.Err() != nil {
			atk.Stop()
		}
	}
	m.Close()
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	if m.Requests == 0 {
		return Result{}, errors.New("vegeta sent no request")
	}
	out.Requests = int64(m.Requests)
	out.Elapsed = m.Duration + m.Wait
	out.P50, out.P99, out.P999 = m.Latencies.P50, m.Latencies.P99, m.Latencies.Quantile(0.999)
	if len(m.Errors) > 0 {
		out.FirstError = m.Errors[0]
	}
	return out, nil
}

// rotating is a targeter sending urls and hs round robin (url and h when
// either is empty); vegeta's workers call it concurrently.
func rotating(url string, urls []string, hs []http.Header, h http.Header) vegeta.Targeter {
	var n atomic.Uint64
	return func(t *vegeta.Target) error {
		if t == nil {
			return vegeta.ErrNilTarget
		}
		i := n.Add(1) - 1
		tgt := vegeta.Target{Method: http.MethodGet, URL: url, Header: h}
		if len(urls) > 0 {
			tgt.URL = urls[i%uint64(len(urls))]
		}
		if len(hs) > 0 {
			tgt.Header = hs[i%uint64(len(hs))]
		}
		*t = tgt
		return nil
	}
}
