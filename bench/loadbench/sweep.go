package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

// The vendor-count sweep (-sweep 1000,10000,100000): for each count of
// active keys, each its own vendor, and each limiter (in process, Redis), a
// fresh gateway is measured from cold to steady state:
//
//  1. the first pass: every key sent once (primeKeys, 64 at a time): each
//     is looked up at the responder on the request path;
//  2. a second pass the same way, every key cached: the first pass's cost
//     against it is what a cold start costs;
//  3. wrk round robin over the keys for -sweep-warmup (past key_cache.ttl,
//     so that keys cached without pushes are in their refresh cycle);
//  4. wrk for -sweep-duration, the rotation going on from the key where
//     the warm-up stopped, measured: req/s, the gateway's CPU per
//     request, the requests that waited on a key lookup (the key cache's
//     misses), the lookups per second (misses and background refreshes),
//     evictions, and the gateway's RSS at the end.

// sweepFigure is one (keys, row) cell of the sweep.
type sweepFigure struct {
	keys int
	row  string
	err  error

	// The passes over every key: their wall time and the gateway's CPU.
	coldWall, coldCPU, warmWall, warmCPU time.Duration
	coldMisses                           float64

	steady                       measurement
	misses, refreshes, evictions float64
	// Refreshes that found their entry expired (the lookups did not keep
	// up), that failed, and those waiting at the end.
	late, refreshFailed, scheduled float64
	pushed                         float64
	rssKiB                         int
}

// sweepRows are the rows the sweep measures, in order.
var sweepRows = []string{rowGateway, rowGatewayRedis}

// Key cache metrics (docs/CONTRACTS.md).
const (
	refreshesMetric = "vendorgate_gateway_key_cache_refreshes_total"
	lateMetric      = "vendorgate_gateway_key_cache_refreshes_late_total"
	failedMetric    = "vendorgate_gateway_key_cache_refresh_failures_total"
	scheduledMetric = "vendorgate_gateway_key_cache_refreshes_scheduled"
	evictionsMetric = "vendorgate_gateway_key_cache_evictions_total"
	pushedMetric    = "vendorgate_gateway_key_cache_pushed"
)

// sweep runs the vendor-count sweep into res.
func (b *bench) sweep(ctx context.Context, res *results) error {
	if len(b.opts.sweep) == 0 {
		return nil
	}
	if b.gatewayBin == "" {
		res.sweepNote = "no gateway binary: " + b.gatewaySkip
		return nil
	}
	b.logf("load average before the sweep: %s", loadAverage())
	for _, n := range b.opts.sweep {
		keys, err := b.keySet(fmt.Sprintf("sweep %d", n), b.sweepKeys[:n])
		if err != nil {
			return err
		}
		for _, id := range sweepRows {
			if err := ctx.Err(); err != nil {
				return err
			}
			f := b.sweepOne(id, keys)
			if f.err != nil {
				b.logf("sweep %d keys, %s: %v", n, rowLabel(id), f.err)
			} else {
				b.logf("sweep %d keys, %-34s %7.0f req/s  cpu %s/req  waited %.3f%%  lookups %.1f/s  rss %d MB  refreshes late %.0f, failed %.0f, waiting at the end %.0f",
					n, rowLabel(id), f.steady.RPS, perRequest(f.steady.ProxyCPU, f.steady.Requests),
					100*f.misses/float64(max(f.steady.Requests, 1)), f.lookupsPerSecond(), f.rssKiB/1024, f.late, f.refreshFailed, f.scheduled)
			}
			res.sweep = append(res.sweep, f)
		}
	}
	res.sweepLoadAfter = loadAverage()
	return nil
}

// sweepOne measures a fresh gateway of row id under keys.
func (b *bench) sweepOne(id string, keys *keySet) sweepFigure {
	f := sweepFigure{keys: len(keys.keys), row: id}
	r, err := b.startGatewayBin(id, b.gatewayBin, id == rowGatewayRedis)
	if err != nil {
		f.err = err
		return f
	}
	defer r.stop()
	if r.skip != "" {
		f.err = fmt.Errorf("%s", r.skip)
		return f
	}
	if id == rowGatewayRedis {
		// The key cache keeps keys long only once its subscription answers
		// (a gateway without the gauge is not waited for).
		deadline := time.Now().Add(10 * time.Second)
		for v, err := metricValue(r.admin, pushedMetric); err == nil && v != 1 && time.Now().Before(deadline); v, err = metricValue(r.admin, pushedMetric) {
			time.Sleep(50 * time.Millisecond)
		}
	}
	pass := func() (wall, cpu time.Duration, misses float64, err error) {
		m0, _ := metricValue(r.admin, missesMetric)
		c0, err := cpuTime(r.main.Pid())
		if err != nil {
			return 0, 0, 0, err
		}
		start := time.Now()
		if err := primeKeys(r.url, keys.keys, 64); err != nil {
			return 0, 0, 0, err
		}
		wall = time.Since(start)
		c1, err := cpuTime(r.main.Pid())
		m1, _ := metricValue(r.admin, missesMetric)
		return wall, c1 - c0, m1 - m0, err
	}
	if f.coldWall, f.coldCPU, f.coldMisses, f.err = pass(); f.err != nil {
		return f
	}
	if f.warmWall, f.warmCPU, _, f.err = pass(); f.err != nil {
		return f
	}
	warm, err := b.gen.run(r.url, keys, 64, b.opts.sweepWarmup)
	if err != nil {
		f.err = err
		return f
	}
	// The measured run goes on from the key where the warm-up stopped: a
	// load generator starts its rotation at the first key, and starting
	// again there would leave the keys past that point unvisited for
	// longer than a round (not the steady state: a key requested every
	// round would find its entry expired).
	from := int(warm.Requests % int64(len(keys.keys)))
	rotated := append(append(make([]string, 0, len(keys.keys)), keys.keys[from:]...), keys.keys[:from]...)
	if keys, f.err = b.keySet(fmt.Sprintf("sweep %d from %d", len(keys.keys), from), rotated); f.err != nil {
		return f
	}
	before := map[string]float64{}
	for _, name := range []string{missesMetric, refreshesMetric, evictionsMetric, lateMetric, failedMetric} {
		before[name], _ = metricValue(r.admin, name)
	}
	c0, err := cpuTime(r.main.Pid())
	if err != nil {
		f.err = err
		return f
	}
	if f.steady, f.err = b.gen.run(r.url, keys, 64, b.opts.sweepDuration); f.err != nil {
		return f
	}
	c1, err := cpuTime(r.main.Pid())
	if err != nil {
		f.err = err
		return f
	}
	f.steady.ProxyCPU, f.steady.CPUOK = c1-c0, true
	if f.steady.Failed > 0 { // reported beside the figures (a 503 of the Redis limiter on a busy machine)
		b.logf("sweep %d keys, %s: %d of %d requests failed (%s)", f.keys, rowLabel(id), f.steady.Failed, f.steady.Requests, f.steady.FailedDetail)
	}
	// A gateway older than the refreshes and pushed metrics (-gateway) has
	// neither: it refreshes nothing, and its pushed state is unknown (-1).
	after := func(name string, required bool) float64 {
		v, err := metricValue(r.admin, name)
		if err != nil && required && f.err == nil {
			f.err = err
		}
		return v - before[name]
	}
	f.misses, f.refreshes, f.evictions = after(missesMetric, true), after(refreshesMetric, false), after(evictionsMetric, true)
	f.late, f.refreshFailed = after(lateMetric, false), after(failedMetric, false)
	f.scheduled, _ = metricValue(r.admin, scheduledMetric)
	if f.pushed, err = metricValue(r.admin, pushedMetric); err != nil {
		f.pushed = -1
	}
	if b.opts.sweepHeap != "" {
		if err := saveHeap(r.admin, filepath.Join(b.opts.sweepHeap, fmt.Sprintf("heap-%d-%s", f.keys, id))); err != nil {
			b.logf("sweep %d keys, %s: heap profile: %v", f.keys, rowLabel(id), err)
		}
	}
	if rss, err := rssKiB(r.main.Pid()); err == nil {
		f.rssKiB = rss
	} else if f.err == nil {
		f.err = err
	}
	return f
}

// heapToken is the sweep gateways' admin token when -sweep-heap asks for
// their heap profiles.
const heapToken = "loadbench-heap-profile-token"

// saveHeap writes the heap profile of the gateway whose admin listener is
// admin, after a collection, to base.pb.gz and its runtime memory
// statistics (the text profile's end) to base.txt.
func saveHeap(admin, base string) error {
	for _, p := range []struct{ query, file string }{{"gc=1", base + ".pb.gz"}, {"debug=1", base + ".txt"}} {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI("http://" + admin + "/debug/pprof/heap?" + p.query)
		req.Header.Set("Authorization", "Bearer "+heapToken)
		err := fasthttp.DoTimeout(req, resp, 30*time.Second)
		if err == nil && resp.StatusCode() != fasthttp.StatusOK {
			err = fmt.Errorf("%s answered %d", req.URI(), resp.StatusCode())
		}
		if err == nil {
			body := resp.Body()
			if i := bytes.Index(body, []byte("\n# runtime.MemStats")); i >= 0 {
				body = body[i+1:]
			}
			err = os.WriteFile(p.file, body, 0o644)
		}
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
		if err != nil {
			return err
		}
	}
	return nil
}

func (f sweepFigure) lookupsPerSecond() float64 {
	if f.steady.Elapsed <= 0 {
		return 0
	}
	return (f.misses + f.refreshes) / f.steady.Elapsed.Seconds()
}

// sweepTable is the sweep's section of the report.
func (res *results) sweepTable() string {
	if len(res.sweep) == 0 && res.sweepNote == "" {
		return ""
	}
	var sb strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&sb, format, a...) }
	w("\n### Vendor-count sweep\n\n")
	if res.sweepNote != "" {
		w("%s\n", res.sweepNote)
		return sb.String()
	}
	o := res.opts
	w("A fresh gateway per cell, each key its own vendor, %d connections (%s): the first pass sends every\n", 64, res.gen)
	w("key once (64 at a time; each is looked up on the request path), a second pass the same again\n")
	w("(every key cached), then %s of round-robin load unmeasured and %s measured (the rotation going on\n", o.sweepWarmup, o.sweepDuration)
	w("from the key where the unmeasured load stopped, so that every key is requested once per round). \"Waited\" is the\n")
	w("requests that waited on a key lookup (the key cache's misses) over all requests; lookups/s counts\n")
	w("those and the background refreshes (no request waits on one). CPU is the gateway process's, per\n")
	w("request. Load average after the sweep: %s.\n", res.sweepLoadAfter)
	if o.sweepPushedTTL > 0 {
		w("The gateways ran with key_cache.pushed_ttl %s (-sweep-pushed-ttl).\n", o.sweepPushedTTL)
	}
	if o.sweepMemLimit != "" {
		w("The gateways ran with GOMEMLIMIT=%s (-sweep-gomemlimit).\n", o.sweepMemLimit)
	}
	w("\n")
	w("| active keys | limiter | req/s | CPU per request | waited on a lookup | key lookups/s (keys/600 s) | evictions | RSS | (RSS − 60 MB) / keys | first pass: CPU per request (second pass) | first pass wall | failed |\n")
	w("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, f := range res.sweep {
		mode := "in-process"
		if f.row == rowGatewayRedis {
			mode = "Redis"
			if f.pushed == 0 && f.err == nil {
				mode += " (invalidations not flowing)"
			}
		}
		if f.err != nil {
			w("| %d | %s | failed: %s |  |  |  |  |  |  |  |  |  |\n", f.keys, mode, oneLine(f.err.Error()))
			continue
		}
		n := float64(f.keys)
		w("| %d | %s | %.0f | %s | %.3f %% (%.0f) | %.1f (%.1f) | %.0f | %.0f MB | %.0f B | %s (%s) | %s | %d |\n",
			f.keys, mode, f.steady.RPS, perRequest(f.steady.ProxyCPU, f.steady.Requests),
			100*f.misses/float64(max(f.steady.Requests, 1)), f.misses, f.lookupsPerSecond(), n/600,
			f.evictions, float64(f.rssKiB)/1024, (float64(f.rssKiB)*1024-60e6)/n,
			perRequest(f.coldCPU, int64(f.keys)), perRequest(f.warmCPU, int64(f.keys)), f.coldWall.Round(10*time.Millisecond), f.steady.Failed)
	}
	w("\n%s", res.sweepRatios())
	return sb.String()
}

// sweepRatios compares each row's largest key count with its 10,000 (or
// smallest) within the run.
func (res *results) sweepRatios() string {
	var sb strings.Builder
	for _, id := range sweepRows {
		var ref, top *sweepFigure
		for i := range res.sweep {
			f := &res.sweep[i]
			if f.row != id || f.err != nil {
				continue
			}
			if ref == nil || f.keys == 10000 || (ref.keys != 10000 && f.keys < ref.keys) {
				ref = f
			}
			if top == nil || f.keys > top.keys {
				top = f
			}
		}
		if ref == nil || top == nil || ref == top {
			continue
		}
		cpu := func(f *sweepFigure) float64 { return float64(f.steady.ProxyCPU) / float64(max(f.steady.Requests, 1)) }
		fmt.Fprintf(&sb, "- %s: CPU per request at %d keys is %.3f× that at %d keys.\n", rowLabel(id), top.keys, cpu(top)/cpu(ref), ref.keys)
	}
	return sb.String()
}

// sweepHeading starts the sweep's section in the document.
const sweepHeading = "\n### Vendor-count sweep\n"

// sweepSection finds the sweep's section in doc: from its heading to the
// next second-level heading or the end.
func sweepSection(doc string) (start, end int, ok bool) {
	start = strings.Index(doc, sweepHeading)
	if start < 0 {
		return 0, 0, false
	}
	end = len(doc)
	if i := strings.Index(doc[start+len(sweepHeading):], "\n## "); i >= 0 {
		end = start + len(sweepHeading) + i + 1
	}
	return start, end, true
}

// spliceSweep returns doc with the sweep section of old when doc has none:
// a run without -sweep keeps the last sweep's table.
func spliceSweep(doc, old string) string {
	if _, _, has := sweepSection(doc); has {
		return doc
	}
	if s, e, ok := sweepSection(old); ok {
		return strings.TrimRight(doc, "\n") + "\n" + old[s:e]
	}
	return doc
}

// replaceSweep returns doc with its sweep section replaced by section (or
// section appended).
func replaceSweep(doc, section string) string {
	if s, e, ok := sweepSection(doc); ok {
		doc = doc[:s] + doc[e:]
	}
	return strings.TrimRight(doc, "\n") + "\n" + section
}

// sweepAlone runs the sweep without the main table and replaces the sweep
// section of out (the rest of the document, the last full run, is kept).
func (b *bench) sweepAlone(ctx context.Context, out string, stdout, stderr io.Writer) error {
	res := &results{opts: b.opts, gen: b.gen.name()}
	if err := b.sweep(ctx, res); err != nil {
		return err
	}
	e := collectEnv(b)
	section := res.sweepTable() + fmt.Sprintf("\nSweep run %s (`cd bench && go run ./loadbench %s`), vendorgate commit %s, %s; load average before: %s.\n",
		e.date.Format("2006-01-02 15:04 UTC"), strings.Join(b.opts.args, " "), e.commit, e.cpu, b.loadBefore)
	if _, err := io.WriteString(stdout, section); err != nil {
		return err
	}
	if out == "" {
		return nil
	}
	old, err := os.ReadFile(out)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	if err := os.WriteFile(out, []byte(replaceSweep(string(old), section)), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	fmt.Fprintf(stderr, "wrote %s\n", out)
	return nil
}
