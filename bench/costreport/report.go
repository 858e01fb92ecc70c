package main

import (
	"fmt"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"time"

	"vendorgate/bench/internal/host"
)

// envInfo is the machine and the versions the figures belong to.
type envInfo struct {
	date                       time.Time
	cpu, kernel, goVer, commit string
	tools                      []string
}

func collectEnv(root string) envInfo {
	e := envInfo{date: time.Now().UTC(), goVer: runtime.Version(), cpu: host.CPU(), kernel: host.Kernel()}
	if out, err := exec.Command("git", "-C", root, "rev-parse", "--short", "HEAD").Output(); err == nil {
		e.commit = strings.TrimSpace(string(out))
	}
	for _, t := range [][]string{{"valgrind", "--version"}, {"strace", "-V"}, {"redis-server", "--version"}} {
		if out, err := exec.Command(t[0], t[1:]...).Output(); err == nil {
			var f []string // "valgrind-3.19.0", "strace 6.1", "Redis server v=7.0.15"
			for _, w := range strings.Fields(strings.SplitN(string(out), "\n", 2)[0]) {
				if w != "--" && w != "version" {
					f = append(f, w)
				}
			}
			e.tools = append(e.tools, strings.Join(f[:min(len(f), 3)], " "))
		}
	}
	return e
}

// report is the markdown page: the run's results and its budget check.
type report struct {
	env     envInfo
	opts    options
	benchMD string // docs/bench.md as it is, for the throughput context
	results []*result
	budgets []budget
	over    []string
}

// perStep is the instructions by step, by row.
func (rep *report) perStep() map[string]map[string]float64 {
	out := map[string]map[string]float64{}
	for _, r := range rep.results {
		out[r.row.name] = r.steps
	}
	return out
}

// where is the results keep selects, in the run's order.
func (rep *report) where(keep func(*result) bool) []*result {
	var out []*result
	for _, r := range rep.results {
		if keep(r) {
			out = append(out, r)
		}
	}
	return out
}

// cells is a row's figures common to the request and handshake tables:
// instructions, request code, LL misses, system calls, allocations,
// bytes, each with its ratio to base.
func (rep *report) cells(r, base *result) string {
	return strings.Join([]string{
		rep.fig(r, base, func(x *result) float64 { return x.ir }, kilo),
		rep.fig(r, base, func(x *result) float64 { return x.irReq }, kilo),
		rep.fig(r, base, func(x *result) float64 { return x.ll }, dec1),
		rep.sysFig(r, base),
		rep.fig(r, base, func(x *result) float64 { return x.bench["allocs/op"] }, dec1),
		rep.fig(r, base, func(x *result) float64 { return x.bench["B/op"] }, dec0),
	}, " | ")
}

func (rep *report) find(name string) *result {
	for _, r := range rep.results {
		if r.row.name == name {
			return r
		}
	}
	return nil
}

// kilo writes an instruction count as 71.4k (5.85M past a million).
func kilo(v float64) string {
	if v >= 1e6 || v <= -1e6 {
		return fmt.Sprintf("%.2fM", v/1e6)
	}
	if v >= 10000 || v <= -10000 {
		return fmt.Sprintf("%.1fk", v/1000)
	}
	if v >= 1000 || v <= -1000 {
		return fmt.Sprintf("%.2fk", v/1000)
	}
	return fmt.Sprintf("%.0f", v)
}

// ratio is " (1.68x)": v over its bare proxy's b, when there is one and
// it is at least 1 (a ratio to a count near zero, such as the cache
// misses of a stream that fits in the cache, says nothing).
func ratio(v, b float64, hasBase bool) string {
	if !hasBase || b < 1 || v < 0 {
		return ""
	}
	return fmt.Sprintf(" (%.2fx)", v/b)
}

func (rep *report) markdown() string {
	var sb strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&sb, format, a...) }
	o := rep.opts
	e := rep.env
	w("# Cost report\n\n")
	w("Written by `make bench-cost` (`cd bench && go run ./costreport -n %d,%d -tls-n %d,%d`); run it again to refresh; do not edit by hand. ",
		o.n[0], o.n[1], o.tlsN[0], o.tlsN[1])
	w("The per-step table by hand is in [bench.md](bench.md#where-the-microseconds-go); the throughput under load, as context (not a gate), in [bench.md](bench.md#results).\n\n")
	w("- Date: %s\n- Machine: %s, Linux %s\n- Go: %s; vendorgate commit %s\n", e.date.Format("2006-01-02 15:04 UTC"), e.cpu, e.kernel, e.goVer, e.commit)
	if len(e.tools) > 0 {
		w("- %s\n", strings.Join(e.tools, "; "))
	}
	w("\n## Method\n\n")
	w("Each row is a benchmark of `gateway` (`go test -c`), one request at a time over one keep-alive connection from a fasthttp client in the same process, ")
	w("GET `/api/vendor/v1/orders/fast` answered by the test backend (also in the process): `BenchmarkServedSerial` through the public listener, ")
	w("`BenchmarkHandshakeSerial` a new TLS connection per request (ECDSA P-256 certificate, the curve pinned to P-256, no session resumption) and one read on it. ")
	w("Every figure is the difference between a run of %d and a run of %d iterations (%d and %d for the handshakes), divided by the difference: start-up cancels out. ",
		o.n[0], o.n[1], o.tlsN[0], o.tlsN[1])
	w("Instructions and last-level cache misses are callgrind's (`valgrind --tool=callgrind --cache-sim=yes`, %s: an AMD Zen 5 core's L1 and one CCD's 32 MB L3; callgrind has no L2), ", strings.Join(caches, " "))
	w("system calls strace's (`strace -f -c`, every thread), both with `%s`; allocations and bytes are the benchmark's own (`-benchmem`, the longer run), ", strings.Join(env, " "))
	w("all of them the whole process: client, proxy and backend (the bare proxy's rows have the same client and backend). ")
	w("\"Request code\" is every function's own count but the Go runtime's (`runtime.*`, `internal/runtime/*`, `sync.*`), as in bench.md's second round. ")
	w("\"10,000 vendors\" sends 10,000 keys round robin, each its own vendor, each resolved and cached before the runs (key cache TTL one hour, so that no refresh falls in a run); ")
	w("\"one vendor\" the same key every time. The gateway's read limit never refuses; its log level is warn. ")
	w("On Redis (a fresh redis-server for each run, started by the tool outside the benchmark's process; the shipped `lease_max` 16 and `lease_ttl` 2 s; the load benchmark's limit of 100,000,000 a minute; `redis.timeout` 5 s and `wire_timeout` 10 s, so that no reply to a process slowed by valgrind counts as a failure, which would drop the leases), ")
	w("script calls (EVALSHA, EVAL) and commands (all of INFO commandstats, those the scripts run included) are Redis' own counts over the longer run's requests. ")
	w("Leases expire on Redis' clock: under callgrind a round of the 10,000 vendors takes far longer than `lease_ttl`, so there every request finds its vendor's lease expired; the load benchmark's many-vendor row (64 connections at full speed) is where they are reused. ")
	w("Every row's process also holds the one-vendor gateway, idle, as the benchmark always started it. ")
	w("redis-server's own instructions are callgrind's on the server (a separate process, reported apart), run under callgrind during the strace runs, so that one valgrind runs at a time. ")
	w("Ratios (`1.68x`) are to the bare proxy on the same request stream.\n\n")

	w("## Per request\n\n")
	w("| stream | row | instructions, whole process | request code | LL misses | system calls | allocations | bytes | Redis script calls | Redis commands | redis-server's instructions |\n")
	w("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rep.results {
		if r.row.tls {
			continue
		}
		base := rep.find(r.row.base)
		stream := "one vendor"
		if strings.HasSuffix(r.row.name, "-many") {
			stream = "10,000 vendors"
		}
		w("| %s | %s | %s | %s | %s | %s |\n", stream, r.row.label, rep.cells(r, base),
			metric(r, "scripts/op"), metric(r, "rediscmds/op"), redisFig(r))
	}
	rep.contractFloor(w)
	rep.syscalls(w)
	rep.handshakes(w)
	rep.stepTable(w)
	rep.manyVendors(w)
	rep.context(w)
	w("\n## Not measured here\n\n")
	if r := rep.find("gateway-redis"); r == nil || r.redisIr < 0 {
		w("- redis-server's own instructions: not measured in this run (they are counted during the strace runs, and need strace).\n")
	}
	w("- The limit kinds other than GCRA and the requests in flight (quotas, sliding windows, concurrency slots): the benchmark's route has none; their steps read 0, and their budgets hold them off this path only.\n")
	w("- Work that follows wall time rather than requests (the usage recorder's flush, the collector's pace, the Redis pipeline's lateness watch, a lease's expiry) is counted per request at valgrind's pace, tens of times slower than the process runs: it weighs more here than at full speed, most in the 10,000-vendor rows (see above). The whole-process counts move between two runs (in the runs this tool was checked with, by 0.6k to 2.7k a request: the bare proxy's 43.4k and 42.8k, the gateway's 74.4k and 76.2k, on Redis 83.0k and 85.7k); the steps repeat within about 2 %% (the key's 3.34k and 3.28k: its parse follows the random key).\n")
	w("- The TLS handshake on the gateway with Redis limits, and a resumed handshake: only full handshakes in process are measured.\n")
	w("- Callgrind's cache model has two levels: the LL misses are of a 32 MB last level with no L2 in front of it, so they count what would leave the L3, not the L2.\n")
	return sb.String()
}

// redisFig is redis-server's own instructions per request, apart from
// the process's.
func redisFig(r *result) string {
	if !r.row.redis || r.redisIr < 0 {
		return "–"
	}
	return kilo(r.redisIr)
}

func dec0(v float64) string { return fmt.Sprintf("%.0f", v) }
func dec1(v float64) string { return fmt.Sprintf("%.1f", v) }

// fig is r's figure f, formatted, with its ratio to base's.
func (rep *report) fig(r, base *result, f func(*result) float64, format func(float64) string) string {
	s := format(f(r))
	if base != nil {
		s += ratio(f(r), f(base), true)
	}
	return s
}

func (rep *report) sysFig(r, base *result) string {
	if !r.strace {
		return "–"
	}
	total := func(x *result) float64 {
		var s float64
		for _, v := range x.sys {
			s += v
		}
		return s
	}
	if base != nil && !base.strace {
		base = nil
	}
	return rep.fig(r, base, total, dec1)
}

func metric(r *result, unit string) string {
	if v, ok := r.bench[unit]; ok {
		return fmt.Sprintf("%.3f", v)
	}
	return "–"
}

// syscalls is the system calls by kind, each row a column: the kinds of
// at least 0.05 a request in some row.
func (rep *report) syscalls(w func(string, ...any)) {
	var cols []*result
	kinds := map[string]bool{}
	for _, r := range rep.results {
		if r.strace && !r.row.tls {
			cols = append(cols, r)
			for k, v := range r.sys {
				if v >= 0.05 || v <= -0.05 {
					kinds[k] = true
				}
			}
		}
	}
	if len(cols) == 0 {
		w("\nSystem calls: not counted (strace not installed).\n")
		return
	}
	var ks []string
	for k := range kinds {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	w("\n## System calls per request, by kind\n\n")
	w("Kinds of at least 0.05 a request in some row; the process's own calls (client and backend included), under strace, which slows every thread alike: the calls that follow wall time (`futex`, `nanosleep`, `epoll_pwait`) move between runs, the socket calls do not.\n\n")
	tableHead(w, []string{"system call"}, cols, nil)
	for _, k := range ks {
		w("| `%s` |", k)
		for _, c := range cols {
			w(" %.2f |", c.sys[k])
		}
		w("\n")
	}
}

// tableHead writes a table's head: the first columns (text), a column
// of figures for each row, the last columns (text).
func tableHead(w func(string, ...any), first []string, cols []*result, last []string) {
	var names, align []string
	for _, f := range first {
		names, align = append(names, f), append(align, "---")
	}
	for _, c := range cols {
		names, align = append(names, label(c)), append(align, "---:")
	}
	for _, l := range last {
		names, align = append(names, l), append(align, "---")
	}
	w("| %s |\n|%s|\n", strings.Join(names, " | "), strings.Join(align, "|"))
}

func label(r *result) string {
	if strings.HasSuffix(r.row.name, "-many") {
		return r.row.label + ", 10,000 vendors"
	}
	return r.row.label
}

// handshakes is the TLS rows' table.
func (rep *report) handshakes(w func(string, ...any)) {
	rs := rep.where(func(r *result) bool { return r.row.tls })
	if len(rs) == 0 {
		return
	}
	w("\n## A full TLS handshake\n\n")
	w("Per handshake and its one read (the read's own cost included: compare with the rows above), at the default GOGC.\n\n")
	w("| row | instructions, whole process | request code | LL misses | system calls | allocations | bytes | GC cycles per 1,000 handshakes |\n")
	w("|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		base := rep.find(r.row.base)
		w("| %s | %s | %s |\n", r.row.label, rep.cells(r, base),
			rep.fig(r, base, func(x *result) float64 { return x.bench["gc/op"] * 1000 }, dec1))
	}
}

// stepTable is the gateway rows' instructions by step, and the budgets.
func (rep *report) stepTable(w func(string, ...any)) {
	cols := rep.where(func(r *result) bool { return strings.HasPrefix(r.row.name, "gateway") })
	if len(cols) == 0 {
		return
	}
	w("\n## Steps and their budgets\n\n")
	w("Instructions per request in each step of the gateway's request (`gateway/flow.go`), by the functions that do it: ")
	w("a function's inclusive count where it does not wait, the own count of code that waits on a socket or a lock (its inclusive count would take in what ran meanwhile). ")
	w("Each figure is followed by its budget (`bench/costreport/budgets.txt`), checked on every run: a step over its budget fails `make bench-cost`.\n\n")
	tableHead(w, []string{"step", "counted in"}, cols, nil)
	for _, s := range steps {
		w("| %s | %s |", s.name, s.what)
		for _, c := range cols {
			w(" %s", kilo(c.steps[s.name]))
			for _, b := range rep.budgets {
				if b.step == s.name && b.row == c.row.name {
					w(" / %s", kilo(b.max))
				}
			}
			w(" |")
		}
		w("\n")
	}
	if len(rep.over) == 0 {
		w("\nEvery step within its budget.\n")
		return
	}
	w("\n**Over budget:**\n\n")
	for _, o := range rep.over {
		w("- %s\n", o)
	}
}

// context quotes the load benchmark's last run (docs/bench.md, written
// by make bench-load) for the rows measured here: throughput beside
// the counts, as context, not a gate.
func (rep *report) context(w func(string, ...any)) {
	lines := strings.Split(rep.benchMD, "\n")
	var date string
	var head []string
	var rows [][]string
	inResults := false
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "- Date: ") && date == "":
			date = strings.TrimPrefix(l, "- Date: ")
		case strings.HasPrefix(l, "## "):
			inResults = l == "## Results"
		case inResults && strings.HasPrefix(l, "| row |") && head == nil:
			head = cells(l)
		case inResults && head != nil && strings.HasPrefix(l, "| ") && !strings.HasPrefix(l, "|---"):
			c := cells(l)
			if len(c) == len(head) && (strings.HasPrefix(c[0], "2 ") || strings.HasPrefix(c[0], "3 ") || strings.HasPrefix(c[0], "4 ")) {
				rows = append(rows, c)
			}
		}
	}
	want := []string{"row", "load", "conns", "req/s", "× bare proxy", "CPU per request: proxy", "Redis"}
	idx := make([]int, len(want))
	for i, n := range want {
		idx[i] = -1
		for j, h := range head {
			if h == n {
				idx[i] = j
			}
		}
		if idx[i] < 0 {
			rows = nil
		}
	}
	w("\n## Context: throughput under load\n\n")
	if len(rows) == 0 {
		w("The load benchmark's table (`make bench-load`, [bench.md](bench.md#results)) was not found in docs/bench.md.\n")
		return
	}
	w("Quoted from the load benchmark's last run in [bench.md](bench.md#results) (%s; `make bench-load`, wrk with 64 connections on the same 2 cores as the proxy and its backend): time, which the machine's other work moves, beside the counts above; not a gate.\n\n", date)
	w("| row | load | conns | req/s | × bare proxy | CPU per request: proxy | CPU per request: Redis |\n|---|---|---:|---:|---:|---:|---:|\n")
	for _, c := range rows {
		var out []string
		for _, i := range idx {
			out = append(out, c[i])
		}
		w("| %s |\n", strings.Join(out, " | "))
	}
}

// cells is a markdown table line's cells, trimmed.
func cells(l string) []string {
	l = strings.TrimSpace(l)
	l = strings.TrimSuffix(strings.TrimPrefix(l, "|"), "|")
	var out []string
	for _, c := range strings.Split(l, "|") {
		out = append(out, strings.TrimSpace(c))
	}
	return out
}

// manyVendors is where each row's 10,000-vendor stream spends more than
// its one-vendor stream: the functions whose own count moved most.
func (rep *report) manyVendors(w func(string, ...any)) {
	first := true
	for _, m := range rep.results {
		one := rep.find(strings.TrimSuffix(m.row.name, "-many"))
		if !strings.HasSuffix(m.row.name, "-many") || one == nil {
			continue
		}
		if first {
			w("\n## Where 10,000 vendors cost more than one\n\n")
			w("The functions whose own instructions per request grew most from the one-vendor stream to the 10,000-vendor one. ")
			w("Work that follows wall time (a flush every interval, the collector's pace) is counted per request as often as the requests are slow: under callgrind tens of times more often than at full speed.\n")
			first = false
		}
		type moved struct {
			name string
			by   float64
		}
		var ms []moved
		for f, v := range m.fnSelf {
			ms = append(ms, moved{f, v - one.fnSelf[f]})
		}
		for f, v := range one.fnSelf {
			if _, ok := m.fnSelf[f]; !ok {
				ms = append(ms, moved{f, -v})
			}
		}
		sort.Slice(ms, func(i, j int) bool { return ms[i].by > ms[j].by })
		w("\n%s: %s a request more (%s against %s)\n\n", m.row.label, kilo(m.ir-one.ir), kilo(m.ir), kilo(one.ir))
		w("| function | own instructions per request, more |\n|---|---:|\n")
		for _, x := range ms[:min(len(ms), 8)] {
			w("| `%s` | %s |\n", x.name, kilo(x.by))
		}
	}
}

// contractFloor compares the in-process gateway with the bare proxy that
// writes the contract's headers: the share of the gateway's cost over the
// bare proxy that the headers alone make (written by the proxy, parsed by
// the client and the backend, all in the measured process).
func (rep *report) contractFloor(w func(string, ...any)) {
	bare, floor, gw := rep.find("bare"), rep.find("bare-headers"), rep.find("gateway")
	if bare == nil || floor == nil || gw == nil {
		return
	}
	over := gw.ir - bare.ir
	w("\nThe contract's headers alone (the bare proxy writing the identity headers the backend reads and the RateLimit, no-store, request id and key expiry headers the client reads, values as long as the gateway's): ")
	times := func(v, b float64) string { return strings.Trim(ratio(v, b, true), " ()") }
	w("%s instructions a request, whole process, %s the bare proxy's; the gateway in process is %s that (%s in request code). ",
		kilo(floor.ir), times(floor.ir, bare.ir), times(gw.ir, floor.ir), times(gw.irReq, floor.irReq))
	if over > 0 {
		w("Of the gateway's %s over the bare proxy, the headers make %.0f %%.\n", kilo(over), 100*(floor.ir-bare.ir)/over)
	} else {
		w("\n")
	}
}
