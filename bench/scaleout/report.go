package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// environment names the machine and the versions a run measured.
type environment struct {
	cpu, kernel, goVersion, postgres, redis, wrk string
	cpus                                         int
}

func describe(ctx context.Context, s *stack) environment {
	e := environment{cpus: runtime.NumCPU(), goVersion: runtime.Version(), cpu: "unknown"}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				e.cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		e.kernel = "Linux " + strings.TrimSpace(string(b))
	}
	first := func(name string, args ...string) string {
		out, _ := exec.CommandContext(ctx, name, args...).CombinedOutput() // wrk -v exits 1
		line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		return strings.TrimSpace(line)
	}
	e.postgres = s.pg.Version()
	e.redis = first("redis-server", "--version")
	if e.wrk = loadGenerator(); e.wrk != "" {
		return e
	}
	e.wrk = first("wrk", "-v")
	if i := strings.Index(e.wrk, " Copyright"); i > 0 {
		e.wrk = e.wrk[:i]
	}
	return e
}

// loadavg is the 1, 5 and 15 minute load average.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

// totals sums the gateways' 2xx rates and takes the worst p99: the runs
// were concurrent, and percentiles of two runs do not add.
func (r *result) totals() (rps float64, requests, non2xx, errs int64, p99 time.Duration) {
	for _, t := range r.load {
		rps += t.rps()
		requests += t.requests
		non2xx += t.non2xx
		errs += t.errors
		p99 = max(p99, t.p99)
	}
	return
}

func (r *result) otherStatuses() string {
	if len(r.limit.other) == 0 {
		return "none"
	}
	var parts []string
	for code, n := range r.limit.other {
		parts = append(parts, fmt.Sprintf("%d×%d", n, code))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// table is the plain-text summary printed at the end of a run.
func (r *result) table() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "gateway\treq/s (2xx)\tp50\tp99\trequests\tnon-2xx\terrors\t")
	for _, t := range r.load {
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%d\t%d\t%d\t\n", t.gateway, t.rps(), ms(t.p50), ms(t.p99), t.requests, t.non2xx, t.errors)
	}
	rps, req, non, errs, p99 := r.totals()
	fmt.Fprintf(tw, "total\t%.0f\t\t%s (worst)\t%d\t%d\t%d\t\n", rps, ms(p99), req, non, errs)
	tw.Flush()
	l := r.limit
	verdict := "EXACT"
	if !l.exact() {
		verdict = "NOT EXACT"
	}
	fmt.Fprintf(&b, "\nlimit %d/%s over %.2fs, both gateways: admitted %d / budget %d (floor %d), limited %d, other %s, transport errors %d: %s\n",
		l.rate, l.period, l.elapsed.Seconds(), l.admitted, l.budget(), l.floor(), l.limited, r.otherStatuses(), l.failed, verdict)
	fmt.Fprintf(&b, "load average before %s, after the measured runs %s\n", r.loadBefore, r.loadAfter)
	for _, f := range r.failures {
		fmt.Fprintf(&b, "\n%s: %s; back to 200 on both gateways %s after it returned", f.part, f.summary(), f.recovery())
		if f.uncached != "" {
			fmt.Fprintf(&b, "; a key no gateway had cached: %s", f.uncached)
		}
	}
	if len(r.failures) > 0 {
		fmt.Fprintln(&b)
	}
	return b.String()
}

// markdown is docs/scaleout.md.
func (r *result) markdown() string {
	var b strings.Builder
	e := r.env
	rps, req, non, errs, p99 := r.totals()
	l := r.limit
	verdict := "exact"
	if !l.exact() {
		verdict = "**not exact**"
	}
	fmt.Fprintf(&b, `# Scaled-out stack: measured

Written by `+"`cd bench && go run ./scaleout`"+` (source: [`+"`bench/scaleout/`"+`](../bench/scaleout/)) on %s.
It starts on loopback, all on one machine: one PostgreSQL server, a Redis Cluster of three masters
(`+"`redis-server --cluster-enabled yes`"+` joined by `+"`redis-cli --cluster create`"+`), two backends on
one PostgreSQL database (one shared reports folder), and two gateways, each balancing over both
backends (`+"`GATEWAY_BACKEND_URL`"+` lists both) and limiting in the cluster (`+"`GATEWAY_REDIS_URL`"+`
lists the three nodes). The backends publish invalidations into the cluster too.

## Machine

| | |
|---|---|
| CPU | %s, %d logical CPUs |
| kernel | %s |
| Go | %s |
| PostgreSQL | %s (fsync off: this measures the gateway tier, not the disk) |
| Redis | %s |
| load generator | %s |
| load average (1, 5, 15 min) | %s before, %s after |

Every process (two gateways, two backends, PostgreSQL, three Redis nodes and both wrk processes)
shares those CPUs, and other work was running on the machine at the same time (see the load
average): read the figures as a floor and as a proof that the scaled-out shape works, not as the
capacity of one gateway on a dedicated host (`+"`docs/bench.md`"+` measures that).

## Throughput

Two wrk processes at the same moment, `+"`wrk -t1 -c%d -d%s --latency`"+`, one per gateway, each
sending `+"`GET /api/vendor/v1/me`"+` with one vendor's key (a read: key resolution from the cache,
the vendor's read limit in the cluster, proxy to one of the two backends, which reads PostgreSQL).
That vendor's read limit is raised (`+"`limits.overrides.<vendor_id>.reads: {rate: 100000000, period: 1m}`"+`)
so that nothing is refused; req/s counts 2xx answers only. Logs at `+"`warn`"+`;
`+"`redis.timeout`"+` %s.

| gateway | req/s (2xx) | p50 | p99 | requests | non-2xx | errors |
|---|---:|---:|---:|---:|---:|---:|
`, r.started.Format("2006-01-02 15:04 MST"), e.cpu, e.cpus, e.kernel, e.goVersion, e.postgres, e.redis, e.wrk,
		r.loadBefore, r.loadAfter, r.o.conns, r.o.load, r.o.redisTimeout)
	for _, t := range r.load {
		fmt.Fprintf(&b, "| %s | %.0f | %s | %s | %d | %d | %d |\n", t.gateway, t.rps(), ms(t.p50), ms(t.p99), t.requests, t.non2xx, t.errors)
	}
	fmt.Fprintf(&b, "| **total** | **%.0f** | | %s (worst gateway) | %d | %d | %d |\n", rps, ms(p99), req, non, errs)
	fmt.Fprintf(&b, `
## Limit exactness across gateways

A fresh vendor on the default read limit (%d a minute, burst %d: GCRA emits one request every
%s), and %d concurrent clients on each gateway sending `+"`GET /api/vendor/v1/me`"+` with its key,
both gateways at once, for %s. Both gateways decide in the cluster, on the one node that owns the
vendor's key.

| | |
|---|---:|
| run (first request sent → last answer read) | %.2f s |
| admitted (200) | **%d** |
| budget: %d + one per %s elapsed | **%d** |
| floor: %d + one per %s between the first answer and the last request sent | %d |
| refused (429 rate_limited) | %d |
| other answers | %s |
| transport errors | %d |
| verdict | %s |

Admitted %d of a budget of %d: the limit is %s across two gateways on a Redis Cluster.
`, l.rate, l.rate, l.interval(), r.o.workers, r.o.limitFor,
		l.elapsed.Seconds(), l.admitted, l.rate, l.interval(), l.budget(), l.rate, l.interval(), l.floor(),
		l.limited, r.otherStatuses(), l.failed, verdict, l.admitted, l.budget(), verdict)
	if len(r.failures) > 0 {
		fmt.Fprintf(&b, `
## One part down at a time

After the measured runs, one part at a time is taken down for %s (the Redis master for the
gateways' `+"`redis.lease_ttl`"+` more, so that their leases run out) while the throughput vendor reads
`+"`GET /api/vendor/v1/me`"+` through both gateways in turn (20 a second, sequentially), then brought
back; "back" is the time from its return until both gateways answer 200 again.

| part down | what the vendor got | back to 200 after |
|---|---|---:|
`, r.o.failFor)
		for _, f := range r.failures {
			got := f.summary()
			if f.uncached != "" {
				got += "; a key no gateway had cached: " + f.uncached
			}
			fmt.Fprintf(&b, "| %s | %s | %s |\n", f.part, got, f.recovery())
		}
	}
	fmt.Fprintf(&b, `
## Reproduce

`+"```sh"+`
cd bench
go run ./scaleout              # about a minute; rewrites docs/scaleout.md
go run ./scaleout -d 2s -out '' # quick look, table only
`+"```"+`

It needs PostgreSQL (`+"`/usr/lib/postgresql/*/bin`"+`; run as root it starts the server as the
postgres user), `+"`redis-server`"+`, `+"`redis-cli`"+` and `+"`wrk`"+`. Every process it starts is stopped when
it ends, also on Ctrl-C, and the run is bounded by `+"`-timeout`"+` (170 s).
`)
	return b.String()
}
