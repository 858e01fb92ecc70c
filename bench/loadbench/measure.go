package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"vendorgate/bench/internal/childproc"
)

// series is every repetition of one row at one connection count; byRep[i]
// is nil when repetition i did not run.
type series struct {
	byRep []*measurement
}

// Load names.
const (
	loadOne  = "one vendor"
	loadMany = "many vendors"
)

// cell is one load at one connection count.
type cell struct {
	load  string
	conns int
}

// cells are the loads measured, the many-vendor load, the headline, first.
func (o options) cells() []cell {
	var out []cell
	for _, c := range o.manyConns {
		out = append(out, cell{loadMany, c})
	}
	for _, c := range o.conns {
		out = append(out, cell{loadOne, c})
	}
	return out
}

// results is what the report is made of.
type results struct {
	opts options
	// The vendor-count sweep (-sweep): its cells, or why it did not run.
	sweep                     []sweepFigure
	sweepNote, sweepLoadAfter string
	gen                       string
	rows                      []*row
	cells                     map[string]map[cell]*series
	// repsDone counts complete repetitions; cut says why the runs stopped
	// early, if they did.
	repsDone int
	cut      string
	notes    []string

	redisCalls    commandStats
	redisRequests int64
	redisReads    int64

	floods []floodFigure

	pressure []pressureFigure

	latencyRate int
	latency     map[string]measurement // medians over the repetitions
	// addedP99 is the median over repetitions of row 4's p99 minus row
	// 1's at latencyRate, paired within each repetition.
	addedP99   time.Duration
	addedP99OK bool

	memory []memoryFigure
	real   []realFigure
	env    envInfo
	// bodyLen is the size of the responder's answer.
	bodyLen int
	// baseline is the commit of row 3b (-baseline), "" without it.
	baseline string
}

type memoryFigure struct {
	row           string
	keys          int
	before, after int // KiB
	// misses is the growth of the gateway's key-cache miss counter while
	// the keys were sent (-1 when /metrics could not be read): the proof
	// that each key was resolved and cached, not refused.
	misses int
	err    error
}

func (b *bench) active() []*row {
	var out []*row
	for _, r := range b.rows {
		if r.skip == "" {
			out = append(out, r)
		}
	}
	return out
}

// measure runs every row at every connection count, the rows interleaved
// within each repetition so that drift of the machine hits all alike.
func (b *bench) measure(ctx context.Context) (*results, error) {
	o := b.opts
	res := &results{opts: o, gen: b.gen.name(), rows: b.rows, cells: map[string]map[cell]*series{},
		redisCalls: commandStats{}, bodyLen: len(b.meBody)}
	for _, r := range b.rows {
		res.cells[r.id] = map[cell]*series{}
		for _, c := range o.cells() {
			res.cells[r.id][c] = &series{byRep: make([]*measurement, o.reps)}
		}
	}
	runs := len(b.active()) * len(o.cells()) * o.reps
	b.logf("load average before the runs: %s (other work on the machine skews the figures)", loadAverage())
	total := time.Duration(runs)*(o.duration+300*time.Millisecond) + time.Duration(len(b.active()))*o.warmup
	if o.latencyDuration > 0 {
		total += time.Duration(len(b.active())*o.reps) * o.latencyDuration
	}
	b.logf("%d measured runs of %s with %s, then the constant-rate runs (about %s in all)", runs, o.duration, b.gen.name(),
		total.Round(time.Second))
	maxConns := 0
	for _, c := range o.cells() {
		maxConns = max(maxConns, c.conns)
	}
	if len(o.manyConns) > 0 {
		// Each gateway resolves and caches every key of the many-vendor
		// load before it is measured: the load is of known vendors.
		for _, r := range b.active() {
			if r.admin == "" {
				continue
			}
			b.logf("%s: sending each of the %d keys of the many-vendor load once", r.label(), len(b.many.keys))
			if err := primeKeys(r.url, b.many.keys, 32); err != nil {
				r.skip = "priming the many-vendor keys failed: " + err.Error()
				b.logf("%s: %s", r.label(), r.skip)
			}
		}
	}
	if o.warmup > 0 {
		for _, r := range b.active() {
			if _, err := b.gen.run(r.url, b.one, maxConns, max(o.warmup, time.Second)); err != nil {
				r.skip = "warm-up failed: " + err.Error()
				b.logf("%s: %s", r.label(), r.skip)
			}
		}
	}
	deadline := b.started.Add(o.maxTime)
	for rep := 0; rep < o.reps; rep++ {
		for _, c := range o.cells() {
			for _, r := range b.active() {
				if err := ctx.Err(); err != nil {
					return nil, fmt.Errorf("interrupted: %w", err)
				}
				if time.Now().Add(o.duration).After(deadline) {
					res.cut = fmt.Sprintf("stopped after %d of %d repetitions: -max-time %s reached", rep, o.reps, o.maxTime)
					b.logf("%s", res.cut)
					return res, nil
				}
				m, err := b.runOne(r, c, res)
				if err != nil {
					res.notes = append(res.notes, fmt.Sprintf("%s, %s, %d conns, repetition %d: %v", r.label(), c.load, c.conns, rep+1, err))
					b.logf("%s", res.notes[len(res.notes)-1])
					continue
				}
				res.cells[r.id][c].byRep[rep] = &m
				if m.Failed > 0 {
					res.notes = append(res.notes, fmt.Sprintf("%s, %s, %d conns, repetition %d: %d of %d requests failed (%s)",
						r.label(), c.load, c.conns, rep+1, m.Failed, m.Requests, m.FailedDetail))
				}
				b.logf("rep %d/%d  %-34s %-12s c=%-4d %9.0f req/s  p50 %s  p99 %s  p99.9 %s%s", rep+1, o.reps, r.label(), c.load, c.conns,
					m.RPS, ms(m.P50), ms(m.P99), ms(m.P999), failedNote(m))
			}
		}
		res.repsDone = rep + 1
	}
	return res, nil
}

// runOne measures r once at cell c, its processes' CPU time, and for a
// Redis row the Redis calls the run caused.
func (b *bench) runOne(r *row, c cell, res *results) (measurement, error) {
	keys := b.one
	if c.load == loadMany {
		keys = b.many
	}
	return b.runLoad(r, keys, c.conns, res)
}

// runLoad runs keys against r at conns connections; res, when not nil,
// sums the Redis calls.
func (b *bench) runLoad(r *row, keys *keySet, conns int, res *results) (measurement, error) {
	var before commandStats
	var readsBefore int64
	if r.redis != nil {
		var err error
		if before, readsBefore, err = readCommandStats(r.redis); err != nil {
			return measurement{}, err
		}
	}
	statusBefore := gatewayOutcomes(r)
	leasesBefore := readLeaseCounts(r)
	cpuBefore := b.cpuOf(r)
	m, err := b.gen.run(r.url, keys, conns, b.opts.duration)
	if err != nil {
		return m, err
	}
	if m.Failed > 0 && r.admin != "" && keys != b.flood && keys != b.unknown {
		m.FailedDetail += explainFailures(r, statusBefore)
	}
	if cpuAfter := b.cpuOf(r); cpuBefore != nil && cpuAfter != nil {
		m.ProxyCPU, m.RedisCPU, m.CPUOK = cpuAfter[0]-cpuBefore[0], cpuAfter[1]-cpuBefore[1], true
	}
	m.Leases = readLeaseCounts(r).minus(leasesBefore)
	if r.main != nil && r.main.Exited() {
		r.skip = "exited during the run: " + r.main.Tail()
		return m, fmt.Errorf("%s", r.skip)
	}
	if r.redis != nil {
		after, readsAfter, err := readCommandStats(r.redis)
		if err != nil {
			return m, err
		}
		d := after.diff(before)
		m.Scripts, m.RedisCommands = d.scriptCalls(), d.total()
		if res != nil && r.id == rowGatewayRedis {
			res.redisReads += readsAfter - readsBefore - 1 // less the INFO call that read it
			for k, v := range d {
				res.redisCalls[k] += v
			}
			res.redisRequests += m.Requests
		}
	}
	return m, nil
}

// Gateway metrics that say what a failed request was answered.
const (
	requestsMetric = "vendorgate_gateway_requests_total"
	limiterMetric  = "vendorgate_gateway_limiter_decisions_total"
)

// gatewayOutcomes snapshots a gateway's answers by status and its limiter
// decisions by outcome; nil for other rows or when unreadable.
func gatewayOutcomes(r *row) map[string]float64 {
	if r.admin == "" {
		return nil
	}
	out := map[string]float64{}
	st, err := metricByLabel(r.admin, requestsMetric, "status")
	if err != nil {
		return nil
	}
	for k, v := range st {
		out["status "+k] = v
	}
	if lim, err := metricByLabel(r.admin, limiterMetric, "outcome"); err == nil {
		for k, v := range lim {
			out["limiter "+k] = v
		}
	}
	return out
}

// explainFailures names what the gateway answered instead of 200 during a
// run, from its metrics, and the last line it logged.
func explainFailures(r *row, before map[string]float64) string {
	after := gatewayOutcomes(r)
	var parts []string
	if before != nil && after != nil {
		keys := make([]string, 0, len(after))
		for k := range after {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if k == "status 200" || k == "limiter allowed" {
				continue
			}
			if d := after[k] - before[k]; d > 0 {
				parts = append(parts, fmt.Sprintf("%s: %.0f", k, d))
			}
		}
	}
	out := ""
	if len(parts) > 0 {
		out = "; gateway metrics: " + strings.Join(parts, ", ")
	}
	if line := lastLogLine(r.main); line != "" {
		out += "; last gateway log line: " + line
	}
	return out
}

func lastLogLine(p *childproc.Proc) string {
	if p == nil {
		return ""
	}
	t := p.Tail()
	if i := strings.LastIndexByte(t, '\n'); i >= 0 {
		t = t[i+1:]
	}
	if len(t) > 300 {
		t = t[:300] + "…"
	}
	return t
}

// cpuOf reads the CPU time of r's proxy, its Redis and the responder;
// nil when one cannot be read.
func (b *bench) cpuOf(r *row) []time.Duration {
	out := make([]time.Duration, 3)
	var err error
	if len(r.procs) > 0 {
		if out[0], err = cpuTime(r.procs[0].Pid()); err != nil {
			return nil
		}
	}
	if r.redis != nil {
		if out[1], err = cpuTime(r.redis.Pid()); err != nil {
			return nil
		}
	}
	if out[2], err = cpuTime(b.responder.Pid()); err != nil {
		return nil
	}
	return out
}

// extras measures latency at half of row 4's peak and the memory figure.
func (b *bench) extras(ctx context.Context, res *results) error {
	if b.opts.latencyDuration > 0 {
		if err := b.halfPeakLatency(ctx, res); err != nil {
			return err
		}
	}
	if b.opts.keys > 0 {
		for _, r := range b.active() {
			if r.main == nil || ctx.Err() != nil {
				continue
			}
			f := memoryFigure{row: r.id, keys: len(b.memKeys), misses: -1}
			missesBefore, mErr := metricValue(r.admin, missesMetric)
			f.before, f.err = rssKiB(r.main.Pid())
			if f.err == nil {
				b.logf("%s: sending %d distinct keys", r.label(), f.keys)
				f.err = primeKeys(r.url, b.memKeys, 32)
			}
			if f.err == nil {
				f.after, f.err = rssKiB(r.main.Pid())
			}
			if missesAfter, err := metricValue(r.admin, missesMetric); err == nil && mErr == nil {
				f.misses = int(missesAfter - missesBefore)
			}
			res.memory = append(res.memory, f)
		}
	}
	return ctx.Err()
}

// missesMetric is the gateway's key-cache miss counter (docs/CONTRACTS.md).
const missesMetric = "vendorgate_gateway_key_cache_misses_total"

// halfPeakLatency runs vegeta's constant-rate attacker at half of row 4's
// peak (the best median req/s over the connection counts) against every
// row, so the other proxies show what the same rate costs them: wrk2 is not
// packaged, and a closed loop cannot hold a rate.
func (b *bench) halfPeakLatency(ctx context.Context, res *results) error {
	peak := 0.0
	for _, c := range b.opts.cells() {
		if s := res.cells[rowGatewayRedis][c]; s != nil && c.load == loadOne {
			if m, ok := s.median(); ok {
				peak = max(peak, m.RPS)
			}
		}
	}
	if peak == 0 {
		return nil
	}
	res.latencyRate = int(peak / 2)
	res.latency = map[string]measurement{}
	runs := map[string]*series{}
	for _, r := range b.active() {
		runs[r.id] = &series{byRep: make([]*measurement, b.opts.reps)}
	}
	var added []float64 // row 4's p99 minus row 1's, per repetition
	for rep := 0; rep < b.opts.reps; rep++ {
		for _, r := range b.active() {
			if err := ctx.Err(); err != nil {
				return err
			}
			m, err := attackRate(r.url, b.one.keys[0], res.latencyRate, b.opts.latencyDuration)
			if err != nil {
				res.notes = append(res.notes, fmt.Sprintf("constant-rate run on %s: %v", r.label(), err))
				continue
			}
			runs[r.id].byRep[rep] = &m
			if m.Failed > 0 {
				res.notes = append(res.notes, fmt.Sprintf("constant-rate run %d on %s: %d of %d requests failed (%s)",
					rep+1, r.label(), m.Failed, m.Requests, m.FailedDetail))
			}
			b.logf("rep %d/%d  constant %d req/s  %-34s achieved %.0f req/s  p50 %s  p99 %s  p99.9 %s%s", rep+1, b.opts.reps,
				res.latencyRate, r.label(), m.RPS, ms(m.P50), ms(m.P99), ms(m.P999), failedNote(m))
		}
		if s1, s4 := runs[rowBackend], runs[rowGatewayRedis]; s1 != nil && s4 != nil && s1.byRep[rep] != nil && s4.byRep[rep] != nil {
			added = append(added, float64(s4.byRep[rep].P99-s1.byRep[rep].P99))
		}
	}
	for id, s := range runs {
		if m, ok := s.median(); ok {
			res.latency[id] = m
		}
	}
	if len(added) > 0 {
		res.addedP99, res.addedP99OK = time.Duration(medianOf(added)), true
	}
	return nil
}

// median is the median of every figure taken separately over the
// repetitions that ran, and the sums of the counts and CPU times (per
// request figures are sums over sums); ok is false when none did.
func (s *series) median() (measurement, bool) {
	var ms []measurement
	for _, m := range s.byRep {
		if m != nil {
			ms = append(ms, *m)
		}
	}
	if len(ms) == 0 {
		return measurement{}, false
	}
	pick := func(f func(measurement) float64) float64 {
		v := make([]float64, len(ms))
		for i, m := range ms {
			v[i] = f(m)
		}
		return medianOf(v)
	}
	out := measurement{
		RPS:  pick(func(m measurement) float64 { return m.RPS }),
		P50:  time.Duration(pick(func(m measurement) float64 { return float64(m.P50) })),
		P99:  time.Duration(pick(func(m measurement) float64 { return float64(m.P99) })),
		P999: time.Duration(pick(func(m measurement) float64 { return float64(m.P999) })),
	}
	for _, m := range ms {
		out.Requests += m.Requests
		out.Failed += m.Failed
		out.OK += m.OK
		out.Scripts += m.Scripts
		out.RedisCommands += m.RedisCommands
		out.ProxyCPU += m.ProxyCPU
		out.RedisCPU += m.RedisCPU
	}
	out.Leases = sumLeases(ms)
	out.CPUOK = true
	for _, m := range ms {
		out.CPUOK = out.CPUOK && m.CPUOK
	}
	return out, true
}

// spread is (max - min) / median of req/s over the repetitions: how far
// to trust a difference between two rows.
func (s *series) spread() (float64, bool) {
	var v []float64
	for _, m := range s.byRep {
		if m != nil {
			v = append(v, m.RPS)
		}
	}
	if len(v) < 2 {
		return 0, false
	}
	lo, hi := v[0], v[0]
	for _, x := range v {
		lo, hi = min(lo, x), max(hi, x)
	}
	med := medianOf(v)
	if med == 0 {
		return 0, false
	}
	return (hi - lo) / med, true
}

// ratio is the median over repetitions of s's req/s divided by ref's in
// the same repetition: interleaved runs share the machine's state.
func (s *series) ratio(ref *series) (float64, bool) {
	if ref == nil {
		return 0, false
	}
	var v []float64
	for i, m := range s.byRep {
		if m != nil && i < len(ref.byRep) && ref.byRep[i] != nil && ref.byRep[i].RPS > 0 {
			v = append(v, m.RPS/ref.byRep[i].RPS)
		}
	}
	if len(v) == 0 {
		return 0, false
	}
	return medianOf(v), true
}

func medianOf(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// ms formats a latency in milliseconds.
func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

func failedNote(m measurement) string {
	if m.Failed == 0 {
		return ""
	}
	return fmt.Sprintf("  (%d failed)", m.Failed)
}
