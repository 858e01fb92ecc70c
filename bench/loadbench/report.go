package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"vendorgate/bench/internal/host"
)

// envInfo is the machine and the versions the figures belong to.
type envInfo struct {
	date    time.Time
	cpu     string
	cores   int
	kernel  string
	goVer   string
	commit  string
	loadgen string
	tools   []string // "nginx 1.22.1", ...
	// loadBefore and loadAfter are /proc/loadavg at the start and the end:
	// on a shared machine, other work skews the figures, tails first.
	loadBefore, loadAfter string
}

func collectEnv(b *bench) envInfo {
	e := envInfo{date: time.Now().UTC(), cores: runtime.NumCPU(), goVer: runtime.Version(), loadgen: b.gen.name(),
		loadBefore: b.loadBefore, loadAfter: loadAverage()}
	e.cpu, e.kernel = host.CPU(), host.Kernel()
	if root := b.root; root != "" {
		if out, err := exec.Command("git", "-C", root, "rev-parse", "--short", "HEAD").Output(); err == nil {
			e.commit = strings.TrimSpace(string(out))
		}
	}
	version := func(name string, args ...string) {
		if _, err := exec.LookPath(name); err != nil {
			return
		}
		out, _ := exec.Command(name, args...).CombinedOutput()
		line := strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
		for _, cut := range []string{" Copyright", " - http"} {
			if i := strings.Index(line, cut); i > 0 {
				line = line[:i]
			}
		}
		if line != "" {
			e.tools = append(e.tools, line)
		}
	}
	version("wrk", "-v")
	version("nginx", "-v")
	version("haproxy", "-v")
	for _, r := range b.rows {
		if r.redis != nil {
			e.tools = append(e.tools, "Redis "+redisVersion(r.redis))
		}
	}
	return e
}

// markdown is the report: the table and what goes with it.
func (res *results) markdown() string {
	var sb strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&sb, format, a...) }
	o := res.opts
	w("| row | load | conns | req/s | spread | p50 | p99 | p99.9 | × bare proxy | × nginx | CPU per request: proxy | Redis | Redis scripts per request | failed |\n")
	w("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, c := range o.cells() {
		for _, r := range res.rows {
			s := res.cells[r.id][c]
			m, ok := s.median()
			if !ok {
				continue
			}
			spread := "–"
			if v, ok := s.spread(); ok {
				spread = fmt.Sprintf("%.0f%%", 100*v)
			}
			proxyCPU, redisCPU, scripts := "–", "–", "–"
			if m.CPUOK && m.OK > 0 && len(r.procs) > 0 {
				proxyCPU = perRequest(m.ProxyCPU, m.OK)
				if r.redis != nil {
					redisCPU = perRequest(m.RedisCPU, m.OK)
					scripts = fmt.Sprintf("%.3f", float64(m.Scripts)/float64(m.OK))
				}
			}
			w("| %s | %s | %d | %.0f | %s | %.2f ms | %.2f ms | %.2f ms | %s | %s | %s | %s | %s | %d |\n", r.label(), c.load, c.conns,
				m.RPS, spread, msf(m.P50), msf(m.P99), msf(m.P999),
				ratioCell(s, res.cells[rowBare][c]), ratioCell(s, res.cells[rowNginx][c]), proxyCPU, redisCPU, scripts, m.Failed)
		}
	}
	w("\nMedians of %d repetition(s) of %s per row and connection count, rows interleaved within each repetition; "+
		"req/s counts 2xx answers only; ratios are the median of the per-repetition ratios; spread is (max - min) / median of req/s over the repetitions. "+
		"Load \"%s\" is %d keys sent round robin, each key its own vendor (each resolved and cached by the gateways before the runs); \"%s\" is one key. "+
		"CPU per request is the user + system time (/proc/PID/stat) of the row's own processes (all of nginx's) and, apart, of its redis-server, "+
		"summed over the repetitions and divided by the 2xx answers; the load generator and the responder are not counted. "+
		"Redis scripts per request are EVALSHA/EVAL calls from Redis' INFO commandstats over the same runs. Load generator: %s, keep-alive, loopback.\n",
		res.repsDone, o.duration, loadMany, o.manyKeys, loadOne, res.gen)
	if res.cut != "" {
		w("\n**%s.**\n", res.cut)
	}
	var skipped []string
	for _, r := range res.rows {
		if r.skip != "" {
			skipped = append(skipped, fmt.Sprintf("- %s: skipped: %s", r.label(), oneLine(r.skip)))
		}
	}
	if len(skipped) > 0 {
		w("\n%s\n", strings.Join(skipped, "\n"))
	}
	if res.redisRequests > 0 {
		w("\n**Redis calls per request** (row 4, from Redis' own INFO before and after each measured run, %d requests): "+
			"%.3f script calls (EVALSHA/EVAL); %.3f socket reads (INFO stats total_reads_processed: one per round trip, "+
			"fewer than the calls when the gateway pipelines them); %.3f commands in all as INFO commandstats counts them, "+
			"which includes the commands a Lua script runs inside Redis (%s).\n",
			res.redisRequests, float64(res.redisCalls.scriptCalls())/float64(res.redisRequests),
			float64(res.redisReads)/float64(res.redisRequests),
			float64(res.redisCalls.total())/float64(res.redisRequests), res.redisCalls)
	}
	if len(res.floods) > 0 {
		w("\n**Floods** (one run of %s per gateway row at %d connections, %s; answers of any status count; "+
			"statuses as the gateway's vendorgate_gateway_requests_total counted them over the run, and 429/s the answers/s times their share of 429s; "+
			"Redis commands from INFO commandstats, every command counted once (a script's own commands too); backend lookups from the responder's %s{route=\"%s\"}; "+
			"CPU per answer as above):\n\n", o.duration, o.floodConns, res.gen, lookupMetric, lookupRoute)
		w("| row | flood | answers/s | 429/s | statuses | Redis scripts per request | Redis commands per request | backend lookups per 1,000 requests | CPU per answer: proxy | Redis |\n")
		w("|---|---|---:|---:|---|---:|---:|---:|---:|---:|\n")
		for _, f := range res.floods {
			if f.err != nil {
				w("| %s | %s | not measured: %s | | | | | | | |\n", rowLabel(f.row), f.kind, oneLine(f.err.Error()))
				continue
			}
			n := f.answers()
			r429, scripts, cmds, lookups, proxyCPU, redisCPU := "–", "–", "–", "–", "–", "–"
			if v := f.perSecond("429"); v >= 0 {
				r429 = fmt.Sprintf("%.0f", v)
			}
			red := f.redis
			if red && n > 0 {
				scripts = fmt.Sprintf("%.3f", float64(f.m.Scripts)/float64(n))
				cmds = fmt.Sprintf("%.3f", float64(f.m.RedisCommands)/float64(n))
			}
			if f.lookups >= 0 && n > 0 {
				lookups = fmt.Sprintf("%.2f", 1000*f.lookups/float64(n))
			}
			if f.m.CPUOK && n > 0 {
				proxyCPU = perRequest(f.m.ProxyCPU, n)
				if red {
					redisCPU = perRequest(f.m.RedisCPU, n)
				}
			}
			w("| %s | %s | %.0f | %s | %s | %s | %s | %s | %s | %s |\n", rowLabel(f.row), f.kind, f.answersPerSecond(), r429,
				f.statusList(), scripts, cmds, lookups, proxyCPU, redisCPU)
		}
		w("\nThe vendor over its limit may send one request an hour: its one request and the first 429 are sent before the run, "+
			"so the run measures the denial remembered in process (want: 0 Redis scripts per request). The unknown keys are %d "+
			"well-formed keys signed with another secret, round robin (want: no backend lookup; the failed-key throttle answers 429 "+
			"past its threshold, counting in Redis when the gateway has one).\n", o.manyKeys)
	}
	if res.latencyRate > 0 {
		w("\n**Latency at half of row 4's peak** (vegeta's constant-rate attacker, as a library in the loadbench process, "+
			"at %d req/s for %s per row, rows interleaved, medians of %d repetition(s); wrk2 is not packaged):\n\n",
			res.latencyRate, o.latencyDuration, o.reps)
		w("| row | achieved req/s | p50 | p99 | p99.9 | failed |\n|---|---:|---:|---:|---:|---:|\n")
		for _, r := range res.rows {
			id := r.id
			if m, ok := res.latency[id]; ok {
				w("| %s | %.0f | %.2f ms | %.2f ms | %.2f ms | %d |\n", rowLabel(id), m.RPS, msf(m.P50), msf(m.P99), msf(m.P999), m.Failed)
			}
		}
		w("\nThe generator shares the cores with the row it measures, so row 1's p99 is the floor of this method on this " +
			"machine, and the rate is half of a peak wrk measured: vegeta spends more CPU per request than wrk.\n")
		if res.addedP99OK {
			w("\np99 added by vendorgate with Redis limiting (row 4 minus row 1, the median of the per-repetition differences) "+
				"at %d req/s: **%.2f ms** (target: at most 1 ms).\n", res.latencyRate, msf(res.addedP99))
		}
	}
	w("%s", res.pressureTable())
	if len(res.memory) > 0 {
		w("\n**Gateway memory** (VmRSS from /proc, after the runs, then after one request with each of the distinct keys, every one resolved and cached; each key is its own vendor, so also its own limiter bucket):\n\n")
		for _, f := range res.memory {
			if f.err != nil {
				w("- %s: %v\n", rowLabel(f.row), f.err)
				continue
			}
			misses := "key-cache misses not read"
			if f.misses >= 0 {
				misses = fmt.Sprintf("%d key-cache misses counted meanwhile", f.misses)
			}
			w("- %s: %.1f MiB after the runs, %.1f MiB with %d keys cached (%s)\n", rowLabel(f.row),
				float64(f.before)/1024, float64(f.after)/1024, f.keys, misses)
		}
	}
	w("%s", res.targets())
	w("%s", res.leaseReport())
	if len(res.notes) > 0 {
		w("\nNotes:\n")
		for _, n := range res.notes {
			w("- %s\n", oneLine(n))
		}
	}
	return sb.String()
}

// targets checks the targets against the table: the ratios at every
// cell, and on the many-vendor load Redis' own CPU and script calls per
// request; the flood of a vendor over its limit wants no Redis script.
func (res *results) targets() string {
	var lines []string
	check := func(id, ref string, want float64) {
		var parts []string
		for _, c := range res.opts.cells() {
			s, rs := res.cells[id][c], res.cells[ref][c]
			if s == nil || rs == nil {
				continue
			}
			if v, ok := s.ratio(rs); ok {
				parts = append(parts, fmt.Sprintf("%s, %d conns %.2f× (%s)", c.load, c.conns, v, verdict(v >= want)))
			}
		}
		if len(parts) > 0 {
			lines = append(lines, fmt.Sprintf("- %s ≥ %.1f× %s: %s", rowLabel(id), want, rowLabel(ref), strings.Join(parts, ", ")))
		}
	}
	lines = append(lines, res.againstBaseline()...)
	check(rowGatewayRedis, rowBare, 0.8)
	check(rowGateway, rowBare, 0.9)
	check(rowGatewayRedis, rowNginx, 1.0)
	for _, c := range res.opts.cells() {
		if c.load != loadMany {
			continue
		}
		s := res.cells[rowGatewayRedis][c]
		if s == nil {
			continue
		}
		m, ok := s.median()
		if !ok || !m.CPUOK || m.OK == 0 {
			continue
		}
		us := float64(m.RedisCPU) / float64(time.Microsecond) / float64(m.OK)
		perReq := float64(m.Scripts) / float64(m.OK)
		lines = append(lines, fmt.Sprintf("- %s, %s, %d conns: Redis' own CPU ≤ 3.5 µs per request: %.1f µs (%s); "+
			"≤ 0.2 script calls per request: %.3f (%s)", rowLabel(rowGatewayRedis), c.load, c.conns, us, verdict(us <= 3.5), perReq, verdict(perReq <= 0.2)))
	}
	for _, f := range res.floods {
		if f.redis && f.kind == floodOver && f.err == nil && f.answers() > 0 {
			calls := "not read"
			if f.limiterCalls >= 0 {
				calls = fmt.Sprintf("%.0f (%s)", f.limiterCalls, verdict(f.limiterCalls == 0))
			}
			lines = append(lines, fmt.Sprintf("- %s, %s: 0 limiter calls to Redis while the denial is remembered, in %d requests: %s, "+
				"as the gateway's %s counts them; Redis saw %d script calls, its usage flushes included",
				rowLabel(f.row), f.kind, f.answers(), calls, redisCallsMetric, f.m.Scripts))
		}
	}
	if res.addedP99OK {
		added := res.addedP99
		lines = append(lines, fmt.Sprintf("- p99 added by row 4 at half its peak ≤ 1 ms: %.2f ms (%s)", msf(added), verdict(added <= time.Millisecond)))
	}
	if len(lines) == 0 {
		return ""
	}
	return "\n**Targets:**\n\n" + strings.Join(lines, "\n") + "\n"
}

func verdict(met bool) string {
	if met {
		return "met"
	}
	return "NOT met"
}

// keptHeading begins the part of docs/bench.md written by hand (the
// profile of the request path, measured with other tools): a rewrite keeps
// it, from the heading to the end, after the generated report.
const keptHeading = "## Where the microseconds go"

// keptSection is the hand-written part of the document old, from
// keptHeading to its end, or "" when it has none.
func keptSection(old string) string {
	i := strings.Index(old, "\n"+keptHeading)
	if i < 0 {
		return ""
	}
	return old[i:]
}

// document is docs/bench.md: the machine, the method and the report (the
// hand-written section after it is kept by the caller, keptSection).
func (res *results) document(report string) string {
	e := res.env
	var sb strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&sb, format, a...) }
	w("# Load benchmark\n\n")
	w("Written by `make bench-load` (`%s`); run it again to refresh. Do not edit by hand, but for the section %q at the end, which a rewrite keeps.\n\n",
		strings.TrimSpace("cd bench && go run ./loadbench "+shellArgs(res.opts.args)), strings.TrimPrefix(keptHeading, "## "))
	w("- Date: %s\n", e.date.Format("2006-01-02 15:04 UTC"))
	w("- Machine: %s, %d cores, Linux %s\n", e.cpu, e.cores, e.kernel)
	w("- Go: %s; vendorgate commit %s\n", e.goVer, e.commit)
	w("- Load average (1, 5, 15 min) at the start: %s; at the end: %s\n", e.loadBefore, e.loadAfter)
	for _, t := range e.tools {
		w("- %s\n", t)
	}
	w("\n## Method\n\n")
	w(`Everything runs on this one machine over loopback, started by the tool itself, each its own process:
one fixed JSON responder (fasthttp; the same process answers every row, so the backend costs the
same CPU everywhere: GET %s answers a %d-byte JSON, and the internal key lookup answers a
KeyResolution for the generated keys, checking X-Internal-Token), and in front of it:

1. nothing (the backend direct);
2. a bare fasthttp proxy (a fasthttp server handing every request to one HostClient: no auth,
   no limits; the floor of proxying in Go);
3. vendorgate with its in-process limiter;
4. vendorgate with Redis limiting (a private redis-server 7 on loopback);
5. nginx proxy_pass to an upstream with keepalive 64, proxy_http_version 1.1, access log off;
6. HAProxy with a per-key request-rate limit in a stick table (track-sc0 on X-API-Key,
   http_req_rate(60s), deny 429 above 10^9) and http-reuse always.

The gateway runs with its default configuration except limits of 100,000,000 per minute (the
limiter is consulted on every request and never denies) and log_level warn (its access log is one
line per request at info), and one vendor, the flood's, limited to one request an hour. Two
loads, each row measured with both: "many vendors" (the headline) sends the keys of a list round
robin (10,000 by default, -many-keys), each key its own vendor and so its own limiter bucket, as a
gateway in front of many vendors sees them (wrk's Lua request function over requests formatted
once); "one vendor" sends the same valid X-API-Key every time. The keys are signed in process with
the gateways' key_signing_secrets (random per run) and known to the responder; before the runs
each gateway resolves and caches every key of the many-vendor load once, so both loads measure
the cached path and the limiter once per request.

Two floods follow on each vendorgate row: the vendor over its limit at full speed (answered 429
from the denial remembered in process: no Redis call), and well-formed keys signed with another
secret from one address (refused at the MAC check: no backend lookup; the failed-key throttle
answers 429 past its threshold).

The tool installs nothing: a row whose tool (nginx, haproxy) is missing is skipped with a line
saying so, and without wrk the load is vegeta's, as a library (-install apt-gets the tools).

Load: %s, keep-alive, closed loop at each connection count; each repetition runs every row once
at every connection count, the rows interleaved; the table is the median of the repetitions, and
each ratio the median of the per-repetition ratios. A row whose check request does not answer the
responder's exact 200 is skipped, not measured. On a 2-core machine the load generator, the proxy
and the responder share the cores, as the reference figures of issue 7 did.

Run it with `+"`make bench-load`"+` (about 9 minutes with the defaults: 4 s per run, 3 repetitions,
the many-vendor load at 64 connections and the one-key load at 16, 64 and 256, bounded by
-max-time, then 20 s of real limits per Redis row); `+"`cd bench && go run ./loadbench -h`"+` lists the flags, for example
`+"`-rows bare,gateway -conns 64 -reps 5`"+` to compare two rows only, or `+"`-out ''`"+` to print without
writing this file. For scale, issue 7 measured on one of these 2-core machines with wrk (1 thread, 64
connections): the responder direct at about 75,000 req/s, a bare fasthttp HostClient proxy at about
39,000, nginx at 31,000 to 37,000 and HAProxy with a stick-table limit at about 48,000.

`, mePath, res.bodyLen, e.loadgen)
	w("## Results\n\n%s", report)
	return sb.String()
}

func ratioCell(s, ref *series) string {
	if ref == nil {
		return "–"
	}
	v, ok := s.ratio(ref)
	if !ok {
		return "–"
	}
	return fmt.Sprintf("%.2f", v)
}

// perRequest is d divided by n, in microseconds.
func perRequest(d time.Duration, n int64) string {
	if n == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond)/float64(n))
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func oneLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	return s
}

// loadAverage is the first three fields of /proc/loadavg.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
