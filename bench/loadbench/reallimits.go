package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"vendorgate/bench/internal/attack"
)

// The real-limits load: many vendors at the specification's read limit,
// each offered reads at a constant rate, against fresh Redis-limited
// gateways (one per lease setting), to see what leases charge in Redis
// when limits are real and whether what the gateway admits stays within
// the bound docs/limits.md states (GCRA with burst + ceil(rate × lease_ttl)).
const (
	realLimit  = 120 // reads a minute per vendor, the burst too
	realPeriod = time.Minute
	realConns  = 128
)

// realLimitsConfig is the gateway's configuration of the real-limits load:
// the specification's limits for every vendor, access log off.
func realLimitsConfig() string {
	return `# loadbench real limits: the specification's limits for every vendor.
limits:
  vendor:
    reads:  {rate: ` + strconv.Itoa(realLimit) + `, period: 1m}
    orders: {rate: 10, period: 1m}
log_level: warn
`
}

// realFigure is one real-limits run on one lease setting.
type realFigure struct {
	row      string
	vendors  int
	rate     int // requests a second in all
	duration time.Duration
	ttl      time.Duration
	counts   realCounts
	leases   leaseCounts
	// gatewayCPU and redisCPU are the processes' CPU time over the run;
	// cpuOK says they were read.
	gatewayCPU, redisCPU time.Duration
	cpuOK                bool
	// detail names what the gateway answered other than 200 and 429.
	detail string
	err    error
}

// realCounts is what one run's answers say, vendor by vendor.
type realCounts struct {
	offered, ok, denied, other int64
	// others counts the answers neither 200 nor 429 by status (0: no
	// answer).
	others map[int]int64
	// burst is the bound's: the limit's burst + ceil(rate × lease_ttl).
	// outside counts the 200s that GCRA with that burst, replaying each
	// vendor's 200s at the times they were answered, does not admit (the
	// bound wants none); ideal is what GCRA with the plain burst admits of
	// each vendor's offered reads at the times they were sent.
	burst   int
	outside int64
	ideal   int64
}

// realRows are the rows the real-limits load runs on: the Redis rows of
// this checkout's gateway that are measured.
func (b *bench) realRows() []string {
	var out []string
	for _, id := range redisRows() {
		if b.has(id) {
			out = append(out, id)
		}
	}
	return out
}

// realLimitsRuns runs the real-limits load once on a fresh gateway and
// Redis per lease setting.
func (b *bench) realLimitsRuns(ctx context.Context, res *results) error {
	o := b.opts
	if !o.realLimits || b.real == nil || b.gatewayBin == "" {
		return nil
	}
	for _, id := range b.realRows() {
		if err := ctx.Err(); err != nil {
			return err
		}
		f := b.realLimitsRun(id)
		if f.err != nil {
			b.logf("real limits, %s: %v", rowLabel(id), f.err)
		} else {
			c := f.counts
			b.logf("real limits, %s: %d requests: %d 200, %d 429, %d other; %d 200s outside GCRA with burst %d; %.3f buckets charged per 200",
				rowLabel(id), c.offered, c.ok, c.denied, c.other, c.outside, c.burst, f.leases.charged/float64(max(c.ok, 1)))
		}
		res.real = append(res.real, f)
	}
	return nil
}

// realLimitsRun starts a gateway with the real limits and row id's lease
// settings on its own Redis, offers each vendor o.realRate reads a second
// for o.realDuration, and stops it.
func (b *bench) realLimitsRun(id string) realFigure {
	o := b.opts
	keys := b.real.keys
	f := realFigure{row: id, vendors: len(keys), rate: len(keys) * o.realRate, duration: o.realDuration, ttl: leaseTTL(id)}
	r, err := b.startGatewayConfig("real-"+id, b.gatewayBin, true, realLimitsConfig()+leaseSettings(id))
	if err != nil {
		f.err = err
		return f
	}
	defer r.stop()
	if r.skip != "" {
		f.err = fmt.Errorf("%s", r.skip)
		return f
	}
	// The check request's key is the one-key load's: a vendor outside the
	// load, so its 200 is no admission of the vendors replayed.
	if err := b.check(r); err != nil {
		f.err = err
		return f
	}
	urls := make([]string, len(keys))
	hs := make([]http.Header, len(keys))
	vendorOf := make(map[string]int, len(keys))
	for i, k := range keys {
		// The query names the key; the gateway passes it to the responder,
		// which ignores it.
		urls[i] = r.url + "?v=" + strconv.Itoa(i)
		hs[i] = http.Header{"X-API-Key": []string{k}}
		vendorOf[urls[i]] = i
	}
	hits := make([][]attack.Hit, len(keys))
	before, statusBefore, cpuBefore := readLeaseCounts(r), gatewayOutcomes(r), b.cpuOf(r)
	b.logf("real limits, %s: %d vendors, %d reads a second each, %d req/s for %s", rowLabel(id), len(keys), o.realRate, f.rate, o.realDuration)
	_, err = attack.Run(context.Background(), attack.Load{URL: r.url, URLs: urls, Rotate: hs, Conns: realConns, Rate: f.rate,
		Duration: o.realDuration, OnResult: func(h attack.Hit) {
			if i, ok := vendorOf[h.URL]; ok {
				hits[i] = append(hits[i], h)
			}
		}})
	if err != nil {
		f.err = err
		return f
	}
	if cpuAfter := b.cpuOf(r); cpuBefore != nil && cpuAfter != nil {
		f.gatewayCPU, f.redisCPU, f.cpuOK = cpuAfter[0]-cpuBefore[0], cpuAfter[1]-cpuBefore[1], true
	}
	f.leases = readLeaseCounts(r).minus(before)
	if r.main.Exited() {
		f.err = fmt.Errorf("the gateway exited during the run: %s", r.main.Tail())
		return f
	}
	f.counts = replayVendors(hits, realLimit, realPeriod, boundExtra(realLimit, realPeriod, f.ttl))
	if f.counts.other > 0 {
		f.detail = strings.TrimPrefix(explainFailures(r, statusBefore), "; ")
	}
	return f
}

// boundExtra is ceil(rate × lease_ttl): the tokens docs/limits.md lets leases
// add to the burst.
func boundExtra(limit int, period, ttl time.Duration) int {
	return int(math.Ceil(float64(limit) * ttl.Seconds() / period.Seconds()))
}

// replayVendors counts each vendor's answers and replays them through GCRA
// at limit per period: its 200s at the times they were answered with a
// burst of limit + extra (each one it refuses is outside the bound), and
// every read offered at the time it was sent with the plain burst (what
// exact GCRA would have admitted).
func replayVendors(hits [][]attack.Hit, limit int, period time.Duration, extra int) realCounts {
	c := realCounts{others: map[int]int64{}, burst: limit + extra}
	var base time.Time
	for _, hs := range hits {
		for _, h := range hs {
			if base.IsZero() || h.Sent.Before(base) {
				base = h.Sent
			}
		}
	}
	for _, hs := range hits {
		var sent, answered []time.Duration
		for _, h := range hs {
			c.offered++
			sent = append(sent, h.Sent.Sub(base))
			switch h.Code {
			case http.StatusOK:
				c.ok++
				answered = append(answered, h.Sent.Add(h.Latency).Sub(base))
			case http.StatusTooManyRequests:
				c.denied++
			default:
				c.other++
				c.others[h.Code]++
			}
		}
		slices.Sort(sent)
		slices.Sort(answered)
		c.ideal += int64(gcraAdmits(sent, limit, period, limit))
		c.outside += int64(len(answered) - gcraAdmits(answered, limit, period, limit+extra))
	}
	return c
}

// gcraAdmits replays times (sorted) through GCRA at limit per period with
// burst, redis_rate's algorithm and the gateway's: a refused request
// charges nothing. It returns how many it admits.
func gcraAdmits(times []time.Duration, limit int, period time.Duration, burst int) int {
	emission := period / time.Duration(limit)
	offset := emission * time.Duration(burst)
	tat := time.Duration(math.MinInt64)
	n := 0
	for _, now := range times {
		t := max(tat, now)
		if now >= t+emission-offset {
			tat = t + emission
			n++
		}
	}
	return n
}

// realReport is the real-limits table.
func (res *results) realReport() string {
	if len(res.real) == 0 {
		return ""
	}
	f0 := res.real[0]
	var sb strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&sb, format, a...) }
	w("\n**Real limits** (the specification's %d reads a minute per vendor, burst %d, for %d vendors, keys each its own vendor, "+
		"each offered %d reads a second at a constant rate: %d req/s in all, round robin over the keys, vegeta as a library "+
		"with up to %d connections, for %s; a fresh gateway and Redis per row, the keys not resolved beforehand):\n\n",
		realLimit, realLimit, f0.vendors, f0.rate/max(f0.vendors, 1), f0.rate, realConns, f0.duration)
	w("| row | requests | 200 | 429 | other | buckets charged per 200 | admitted from leases | CPU per answer: gateway | Redis | bound: burst | 200s outside the bound | 200s / what plain GCRA admits |\n")
	w("|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, f := range res.real {
		if f.err != nil {
			w("| %s | not measured: %s | | | | | | | | | | |\n", rowLabel(f.row), oneLine(f.err.Error()))
			continue
		}
		c := f.counts
		charged, fromLeases, gw, red := "–", "–", "–", "–"
		if f.leases.ok && c.ok > 0 {
			charged = fmt.Sprintf("%.3f", f.leases.charged/float64(c.ok))
			fromLeases = fmt.Sprintf("%.0f%%", 100*f.leases.admissions/float64(c.ok))
		}
		if answers := c.offered - c.others[0]; f.cpuOK && answers > 0 {
			gw, red = perRequest(f.gatewayCPU, answers), perRequest(f.redisCPU, answers)
		}
		share := "–"
		if c.ideal > 0 {
			share = fmt.Sprintf("%.2f%%", 100*float64(c.ok)/float64(c.ideal))
		}
		w("| %s | %d | %d | %d | %s | %s | %s | %s | %s | %d | %d | %s |\n", rowLabel(f.row), c.offered, c.ok, c.denied,
			c.otherList(), charged, fromLeases, gw, red, c.burst, c.outside, share)
	}
	for _, f := range res.real {
		if f.detail != "" {
			w("\n- %s, answers neither 200 nor 429: %s", rowLabel(f.row), oneLine(f.detail))
		}
	}
	w("\n\nThe bound: each vendor's 200s, at the times they were answered (vegeta's send time plus latency; the gateway decided " +
		"earlier, so the replay is no kinder than the truth), replayed through GCRA with a burst of the limit plus " +
		"ceil(rate × lease_ttl) (122 for a 1 s lease, 124 for 2 s) must all be admitted; \"outside the bound\" counts those it " +
		"refuses (want 0). The last column is the 200s over what GCRA with the plain burst admits of every read offered, " +
		"at the times they were sent (want at least 99 %%). Offering the limit's own rate, a vendor never spends its burst: " +
		"every read should answer 200, and the bound cannot be crossed on this load; the figure that moves is the buckets " +
		"charged in Redis per 200.\n")
	return sb.String()
}

// otherList is the answers neither 200 nor 429, by status.
func (c realCounts) otherList() string {
	if c.other == 0 {
		return "0"
	}
	codes := make([]int, 0, len(c.others))
	for k := range c.others {
		codes = append(codes, k)
	}
	sort.Ints(codes)
	parts := make([]string, len(codes))
	for i, k := range codes {
		name := strconv.Itoa(k)
		if k == 0 {
			name = "no answer"
		}
		parts[i] = fmt.Sprintf("%s: %d", name, c.others[k])
	}
	return strings.Join(parts, ", ")
}

// realTargets are issue 21's targets of the real-limits load: the bound
// holds and at most 0.5 buckets charged per request, with the default
// leases (and, for comparison, lease_ttl 1s).
func (res *results) realTargets() []string {
	var out []string
	for _, f := range res.real {
		if f.err != nil || (f.row != rowGatewayRedis && f.row != rowRedisTTL1) {
			continue
		}
		c := f.counts
		name := fmt.Sprintf("- %s, real limits (%d vendors)", rowLabel(f.row), f.vendors)
		out = append(out, fmt.Sprintf("%s: every 200 within GCRA with burst %d: %d outside (%s); 200s at least 99 %% of what plain GCRA admits: %.2f%% (%s)",
			name, c.burst, c.outside, verdict(c.outside == 0), 100*float64(c.ok)/float64(max(c.ideal, 1)), verdict(float64(c.ok) >= 0.99*float64(c.ideal))))
		if f.leases.ok && c.ok > 0 {
			v := f.leases.charged / float64(c.ok)
			out = append(out, fmt.Sprintf("%s: ≤ 0.5 buckets charged per request: %.3f (%s)", name, v, verdict(v <= 0.5)))
		}
	}
	return out
}

// realLimitsFlags declares the flags of the real-limits load.
func realLimitsFlags(fs *flag.FlagSet, o *options) {
	fs.BoolVar(&o.realLimits, "real-limits", true, "after the table, run the real-limits load on each Redis row measured (a fresh gateway and Redis each, "+
		"the specification's 120 reads a minute per vendor) and check what it admits against the bound of its lease_ttl")
	fs.IntVar(&o.realVendors, "real-vendors", 1000, "vendors of the real-limits load, keys each its own vendor, sent round robin")
	fs.IntVar(&o.realRate, "real-rate", 2, "reads a second offered to each vendor of the real-limits load, at a constant rate")
	fs.DurationVar(&o.realDuration, "real-duration", 20*time.Second, "length of each real-limits run")
}

// checkRealLimits validates the real-limits flags.
func (o options) checkRealLimits() error {
	if o.realLimits && (o.realVendors < 1 || o.realRate < 1 || o.realDuration < time.Second) {
		return errors.New("-real-vendors and -real-rate must be at least 1 and -real-duration at least 1s (or -real-limits=false)")
	}
	return nil
}
