package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// Pressure modes: CPU taken from the gateway while Redis stays healthy.
const (
	pressureNone  = "none"
	pressureBusy  = "busy"  // one spinning process more than there are cores
	pressureQuota = "quota" // the gateway process alone held to 0.3 CPU (cgroup v1 cpu)
)

// rowGatewayRedisBase is the Redis-limited gateway of -baseline-gateway: the
// binary of another commit, measured in the same run for a before/after.
const rowGatewayRedisBase = "gateway-redis-base"

// cgroupCPU is the cgroup v1 cpu controller the quota mode uses.
const cgroupCPU = "/sys/fs/cgroup/cpu"

// pressureFigure is one gateway row under one pressure mode in one
// repetition.
type pressureFigure struct {
	row, mode string
	rep       int
	m         measurement
	// Deltas of the gateway's own counters over the run.
	unavailable float64 // answers 503 rate_limit_unavailable (limiter decisions "unavailable")
	status503   float64 // answers 503 of any code
	opened      float64 // limiter breaker transitions to open
	err         error
}

// pressureRuns measures every gateway row under each -pressure mode and
// without pressure, the many-vendor load at the first -many-conns count
// (else the first -conns), interleaved: each repetition runs every mode,
// and within it every row.
func (b *bench) pressureRuns(ctx context.Context, res *results) error {
	if len(b.opts.pressure) == 0 {
		return nil
	}
	keys, conns := b.many, 0
	switch {
	case len(b.opts.manyConns) > 0:
		conns = b.opts.manyConns[0]
	default:
		keys, conns = b.one, b.opts.conns[0]
	}
	modes := append([]string{pressureNone}, b.opts.pressure...)
	for rep := 0; rep < b.opts.reps; rep++ {
		for _, mode := range modes {
			for _, r := range b.active() {
				if r.admin == "" {
					continue
				}
				if err := ctx.Err(); err != nil {
					return fmt.Errorf("interrupted: %w", err)
				}
				f := b.underPressure(r, mode, keys, conns)
				f.rep = rep
				res.pressure = append(res.pressure, f)
				if f.err != nil {
					b.logf("pressure %-5s %-40s %v", mode, r.label(), f.err)
					continue
				}
				b.logf("pressure %-5s rep %d %-40s %7.0f 200/s, %4.0f 503 rate_limit_unavailable, %4.0f 503 in all, breaker opened %0.f times",
					mode, rep+1, r.label(), f.m.RPS, f.unavailable, f.status503, f.opened)
			}
		}
	}
	return nil
}

// underPressure runs the load on r with mode applied for the run only.
func (b *bench) underPressure(r *row, mode string, keys *keySet, conns int) pressureFigure {
	f := pressureFigure{row: r.id, mode: mode}
	var release func()
	switch mode {
	case pressureBusy:
		release, f.err = spin(busyLoops())
	case pressureQuota:
		if r.main == nil {
			f.err = errors.New("no gateway process")
		} else {
			release, f.err = quota(r.main.Pid())
		}
	}
	if f.err != nil {
		return f
	}
	defer func() {
		if release != nil {
			release()
		}
	}()
	u0, s0, o0, err := gatewayCounters(r.admin)
	if err != nil {
		f.err = err
		return f
	}
	if f.m, f.err = b.gen.run(r.url, keys, conns, b.opts.duration); f.err != nil {
		return f
	}
	if release != nil {
		release() // read the counters at full speed
		release = nil
	}
	u1, s1, o1, err := gatewayCounters(r.admin)
	if err != nil {
		f.err = err
		return f
	}
	f.unavailable, f.status503, f.opened = u1-u0, s1-s0, o1-o0
	return f
}

// gatewayCounters reads the counters a pressure run compares: 503 rate
// limit unavailable, 503 in all, limiter breaker opens.
func gatewayCounters(admin string) (unavailable, status503, opened float64, err error) {
	status, body, err := fasthttp.GetTimeout(nil, "http://"+admin+"/metrics", 5*time.Second)
	if err != nil {
		return 0, 0, 0, err
	}
	if status != fasthttp.StatusOK {
		return 0, 0, 0, fmt.Errorf("GET /metrics: status %d", status)
	}
	for _, line := range strings.Split(string(body), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		v, perr := strconv.ParseFloat(f[1], 64)
		if perr != nil {
			continue
		}
		switch {
		case strings.HasPrefix(line, limiterMetric+"{") && strings.Contains(line, `outcome="unavailable"`):
			unavailable += v
		case strings.HasPrefix(line, requestsMetric+"{") && strings.Contains(line, `status="503"`):
			status503 += v
		case strings.HasPrefix(line, "vendorgate_gateway_breaker_transitions_total{") &&
			strings.Contains(line, `breaker="redis"`) && strings.Contains(line, `to="open"`):
			opened += v
		}
	}
	return unavailable, status503, opened, nil
}

// spin starts n processes that each spin on a core (a shell's empty loop)
// and returns the function that kills them.
func spin(n int) (stop func(), err error) {
	var cmds []*exec.Cmd
	stop = func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}
	for i := 0; i < n; i++ {
		c := exec.Command("sh", "-c", "while :; do :; done")
		if err := c.Start(); err != nil {
			stop()
			return nil, err
		}
		cmds = append(cmds, c)
	}
	return stop, nil
}

// quota holds pid to 30 ms of CPU per 100 ms (0.3 CPU, a Kubernetes
// "cpu: 300m" limit) in a cgroup v1 cpu group of its own, and returns the
// function that moves it back and removes the group.
func quota(pid int) (release func(), err error) {
	if _, err := os.Stat(filepath.Join(cgroupCPU, "cpu.cfs_quota_us")); err != nil {
		return nil, errors.New("no cgroup v1 cpu controller at " + cgroupCPU)
	}
	dir := filepath.Join(cgroupCPU, "loadbench-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
		return nil, err
	}
	write := func(name, v string) error { return os.WriteFile(filepath.Join(dir, name), []byte(v), 0o644) }
	release = func() {
		// Every thread of pid back to the root group, then the group gone.
		_ = os.WriteFile(filepath.Join(cgroupCPU, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
		_ = syscall.Rmdir(dir)
	}
	for _, kv := range [][2]string{{"cpu.cfs_period_us", "100000"}, {"cpu.cfs_quota_us", "30000"}, {"cgroup.procs", strconv.Itoa(pid)}} {
		if err := write(kv[0], kv[1]); err != nil {
			release()
			return nil, fmt.Errorf("cgroup %s: %w", kv[0], err)
		}
	}
	return release, nil
}

// busyLoops is how many spinning processes the busy mode starts: one more
// than the cores, as three on a two-core node.
func busyLoops() int { return runtime.NumCPU() + 1 }

// pressureTable is the report's section on the runs under pressure.
func (res *results) pressureTable() string {
	if len(res.pressure) == 0 {
		return ""
	}
	var sb strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&sb, format, a...) }
	w("\n**A busy node, Redis healthy** (-pressure: the many-vendor load on each gateway row without pressure and under each mode, "+
		"%d repetition(s) of %s, interleaved; \"busy\" is %d processes spinning in a shell loop on the %d cores beside everything else, "+
		"\"quota\" the gateway process alone held to 0.3 CPU by a cgroup v1 cpu quota (30 ms per 100 ms). "+
		"200/s is the median over the repetitions, share the median of the per-repetition 200/s under pressure ÷ 200/s without; "+
		"503 counts are sums over the repetitions from the gateway's own counters (rate_limit_unavailable: limiter decisions \"unavailable\"; "+
		"breaker opens: transitions of breaker=\"redis\" to open)):\n\n",
		res.opts.reps, res.opts.duration, busyLoops(), runtime.NumCPU())
	w("| row | pressure | 200/s | share of 200/s without pressure | answers | 503 rate_limit_unavailable | 503 in all | limiter breaker opens |\n")
	w("|---|---|---:|---:|---:|---:|---:|---:|\n")
	type key struct{ row, mode string }
	by := map[key][]pressureFigure{}
	var order []key
	for _, f := range res.pressure {
		k := key{f.row, f.mode}
		if _, ok := by[k]; !ok {
			order = append(order, k)
		}
		by[k] = append(by[k], f)
	}
	sort.SliceStable(order, func(i, j int) bool { return order[i].row < order[j].row })
	for _, k := range order {
		var rps, shares []float64
		var answers int64
		var unavailable, s503, opened float64
		var errs []string
		for _, f := range by[k] {
			if f.err != nil {
				errs = append(errs, oneLine(f.err.Error()))
				continue
			}
			rps = append(rps, f.m.RPS)
			answers += f.m.Requests
			unavailable += f.unavailable
			s503 += f.status503
			opened += f.opened
			for _, base := range by[key{k.row, pressureNone}] {
				if base.rep == f.rep && base.err == nil && base.m.RPS > 0 {
					shares = append(shares, f.m.RPS/base.m.RPS)
				}
			}
		}
		if len(rps) == 0 {
			w("| %s | %s | not measured: %s | | | | | |\n", rowLabel(k.row), k.mode, strings.Join(errs, "; "))
			continue
		}
		share := "–"
		if k.mode != pressureNone && len(shares) > 0 {
			share = fmt.Sprintf("%.2f", medianFloat(shares))
		}
		w("| %s | %s | %.0f | %s | %d | %.0f | %.0f | %.0f |\n", rowLabel(k.row), k.mode, medianFloat(rps), share, answers, unavailable, s503, opened)
	}
	return sb.String()
}

func medianFloat(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
