package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"vendorgate/bench/internal/childproc"
	"vendorgate/shared/testredis"
)

// cell is one setting of the machine and of Redis.
type cell struct {
	name   string
	busy   int     // spinning processes on the machine
	quota  float64 // the gateway's CPU quota in CPUs; 0: none
	pinned bool    // Redis on core 1, the gateway and the busy loops on core 0
	tls    bool    // Redis over TLS (rediss://)
	outage string  // "", "pause" (SIGSTOP), "kill" (SIGKILL), "hole" (the proxy stops forwarding)
	limit  string  // the reads' limit besides GCRA: "", limitQuota, limitWindow or limitConcurrency
}

// The limits a cell may put on the reads (see gatewayConfig): beside the
// GCRA row a daily quota, the reads row as a sliding window, or a cap on
// the reads in flight at once over every gateway. Each is a Redis call of
// its own per request, through the limiter's transport.
const (
	limitQuota       = "quota"
	limitWindow      = "window"
	limitConcurrency = "concurrency"
)

func allCells() []cell {
	cs := []cell{}
	for n := 0; n <= 4; n++ {
		cs = append(cs, cell{name: fmt.Sprintf("busy%d", n), busy: n})
	}
	for _, q := range []float64{1.0, 0.5, 0.2} {
		cs = append(cs, cell{name: fmt.Sprintf("quota%.1f", q), quota: q})
	}
	cs = append(cs,
		cell{name: "quota0.2-busy2", quota: 0.2, busy: 2},
		cell{name: "pinned-busy2", busy: 2, pinned: true},
		cell{name: "pinned-busy4", busy: 4, pinned: true},
		cell{name: "pinned-quota0.2-busy2", busy: 2, quota: 0.2, pinned: true},
		cell{name: "tls-busy0", tls: true},
		cell{name: "tls-busy2", busy: 2, tls: true},
		cell{name: "tls-quota0.2", quota: 0.2, tls: true},
		cell{name: "pause", outage: "pause"},
		cell{name: "kill", outage: "kill"},
		cell{name: "hole", outage: "hole"},
		cell{name: "tls-pause", outage: "pause", tls: true},
		cell{name: "tls-hole", outage: "hole", tls: true},
		cell{name: "busy2-pause", busy: 2, outage: "pause"},
		cell{name: "quota0.5-pause", quota: 0.5, outage: "pause"},
	)
	// The other kinds of limit, in the cells that answered false 503s
	// before they kept the limiter's rule, and an outage.
	for _, l := range []string{limitQuota, limitWindow, limitConcurrency} {
		cs = append(cs,
			cell{name: l + "-busy0", limit: l},
			cell{name: l + "-busy2", busy: 2, limit: l},
			cell{name: l + "-quota0.2-busy2", quota: 0.2, busy: 2, limit: l},
			cell{name: l + "-pinned-busy2", busy: 2, pinned: true, limit: l},
			cell{name: l + "-pause", outage: "pause", limit: l},
		)
	}
	return cs
}

func findCell(cs []cell, name string) (cell, bool) {
	for _, c := range cs {
		if c.name == name {
			return c, true
		}
	}
	return cell{}, false
}

// result is one build's run of one cell.
type result struct {
	cell     cell
	build    string
	counts   map[string]int
	answers  int
	seconds  float64
	false503 int           // 503 rate_limit_unavailable before any outage
	slowlog  int           // commands Redis ran for redis.timeout or more
	longest  int           // Redis' longest command (LATENCY, ms)
	detect   time.Duration // outage to the first 503 rate_limit_unavailable; -1: none
	worst    time.Duration // the longest a request waited for its answer after the outage
	gateway  string        // the gateway's own count: Redis errors by kind, breaker trips
	note     string
}

func (r result) line() string {
	return fmt.Sprintf("%-22s %-24s %6d answers: 200 %d, 429 %d, 503u %d, shed %d, other %d; false %d; slowlog %d; detect %s; gateway: %s %s",
		r.cell.name, r.build, r.answers, r.counts[kindOK], r.counts[kindLimited], r.counts[kindUnavailable],
		r.counts[kindShed], r.counts[kindOther], r.false503, r.slowlog, r.detectCell(), r.gateway, r.note)
}

func (r result) detectCell() string {
	switch {
	case r.cell.outage == "":
		return "–"
	case r.detect < 0:
		return "none"
	}
	return fmt.Sprintf("%d ms", r.detect.Milliseconds())
}

// runCell starts Redis and the gateway of b as c asks, offers load for
// o.cellFor, injects c's outage a third of the way in, and counts.
func runCell(ctx context.Context, dir string, c cell, b build, be *backend, o options) (result, error) {
	res := result{cell: c, build: b.name, counts: map[string]int{}, detect: -1}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, err
	}
	redisCPU, gwCPU := "", ""
	if c.pinned {
		if runtime.NumCPU() < 2 {
			return res, errors.New("pinning needs two cores")
		}
		redisCPU, gwCPU = "1", "0"
	}
	rs, err := startRedis(dir, redisCPU, c.tls, int(redisTimeout/time.Microsecond))
	if err != nil {
		return res, err
	}
	defer rs.stop()
	via := ""
	var h *testredis.Hole
	if c.outage == "hole" {
		if h, err = testredis.StartHole(rs.addr()); err != nil {
			return res, err
		}
		defer h.Close()
		via = h.Addr()
	}
	gw, url, admin, err := startGateway(dir, b.bin, gwCPU, rs.url(via), be, c.limit)
	if err != nil {
		return res, err
	}
	defer gw.Stop(5 * time.Second)
	if c.quota > 0 {
		release, err := quota(gw.Pid(), c.quota, fmt.Sprintf("redisrule-%d", os.Getpid()))
		if err != nil {
			return res, err
		}
		defer release()
	}
	if c.busy > 0 {
		stopSpin, err := spin(c.busy, gwCPU)
		if err != nil {
			return res, err
		}
		defer stopSpin()
	}
	time.Sleep(300 * time.Millisecond)
	cctx, cancel := context.WithTimeout(ctx, o.cellFor)
	defer cancel()
	t0 := time.Now()
	outageAt := time.Duration(-1)
	injected := make(chan error, 1)
	if c.outage != "" {
		go func() {
			select {
			case <-cctx.Done():
				injected <- nil
				return
			case <-time.After(o.cellFor / 3):
			}
			// Redis' own account up to the outage (a killed Redis has none
			// after it).
			sl, lg, err := rs.slow()
			res.slowlog, res.longest = sl, lg
			if err != nil {
				res.note = "slowlog: " + err.Error()
			}
			outageAt = time.Since(t0)
			switch c.outage {
			case "pause":
				err = rs.signal(syscall.SIGSTOP)
			case "kill":
				err = rs.signal(syscall.SIGKILL)
			case "hole":
				h.Hold()
			}
			injected <- err
		}()
	}
	answers := offer(cctx, url, be.keys, o.workers, t0)
	if c.outage != "" {
		if err := <-injected; err != nil {
			return res, err
		}
	} else {
		sl, lg, err := rs.slow()
		res.slowlog, res.longest = sl, lg
		if err != nil {
			res.note = "slowlog: " + err.Error()
		}
	}
	res.seconds = o.cellFor.Seconds()
	for _, a := range answers {
		res.answers++
		k := a.kind()
		res.counts[k]++
		before := outageAt < 0 || a.end < outageAt
		if k == kindUnavailable && before {
			res.false503++
		}
		if outageAt >= 0 && !before {
			if k == kindUnavailable && res.detect < 0 {
				res.detect = a.end - outageAt
			}
			res.worst = max(res.worst, a.end-max(a.start, outageAt))
		}
	}
	if gw.Exited() {
		return res, fmt.Errorf("the gateway exited: %s", gw.Tail())
	}
	res.gateway = gatewayCounts(admin)
	return res, nil
}

// startGateway starts the gateway binary bin (pinned to cpu when not
// empty) limiting in Redis at redisURL, the reads under limit besides
// GCRA (see gatewayConfig), and waits until it answers.
func startGateway(dir, bin, cpu, redisURL string, be *backend, limit string) (p *childproc.Proc, url, admin string, err error) {
	cfg := filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(cfg, []byte(gatewayConfig(limit)), 0o644); err != nil {
		return nil, "", "", err
	}
	addr, err := childproc.FreeAddr()
	if err != nil {
		return nil, "", "", err
	}
	if admin, err = childproc.FreeAddr(); err != nil {
		return nil, "", "", err
	}
	env := []string{
		"GATEWAY_LISTEN=" + addr,
		"GATEWAY_ADMIN_LISTEN=" + admin,
		"GATEWAY_BACKEND_URL=http://" + be.addr,
		"GATEWAY_INTERNAL_TOKEN=" + be.token,
		"GATEWAY_KEY_SIGNING_SECRETS=" + be.signing,
		"GATEWAY_REDIS_URL=" + redisURL,
		"GATEWAY_LOG_LEVEL=warn",
		"GATEWAY_MAX_CONNS_PER_PEER=100000",
		"GATEWAY_MAX_NEW_CONNS_PER_PEER=100000",
	}
	args := []string{"-config", cfg}
	if cpu != "" {
		args = append([]string{"-c", cpu, bin}, args...)
		if bin, err = exec.LookPath("taskset"); err != nil {
			return nil, "", "", err
		}
	}
	if p, err = childproc.Start(dir, "gateway", env, bin, args...); err != nil {
		return nil, "", "", err
	}
	url = "http://" + addr + mePath
	if err := p.WaitTCP(addr, 15*time.Second); err != nil {
		p.Kill()
		return nil, "", "", err
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("X-API-Key", be.keys[1])
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, url, admin, nil
			}
		}
		if time.Now().After(deadline) {
			p.Kill()
			return nil, "", "", fmt.Errorf("the gateway does not answer 200 (%v): %s", err, strings.TrimSpace(p.Tail()))
		}
	}
}

// gatewayCounts is the gateway's own account of Redis: its Redis errors by
// kind and breaker trips (non-zero samples), from its admin /metrics.
func gatewayCounts(admin string) string {
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		return "metrics: " + err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var out []string
	for _, line := range strings.Split(string(body), "\n") {
		for _, name := range []string{"vendorgate_gateway_redis_errors_total{", "vendorgate_gateway_redis_breaker_trips_total{", "vendorgate_gateway_limiter_shed_total "} {
			if strings.HasPrefix(line, name) && !strings.HasSuffix(line, " 0") {
				out = append(out, strings.TrimPrefix(line, "vendorgate_gateway_"))
			}
		}
	}
	if len(out) == 0 {
		return "no Redis errors"
	}
	return strings.Join(out, ", ")
}
