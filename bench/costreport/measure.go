package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// result is one row's figures, per request (per handshake for a TLS row).
type result struct {
	row    row
	n      [2]int
	ir     float64            // instructions, the whole process
	irReq  float64            // instructions of request code (isRequestCode)
	ll     float64            // last-level cache misses, instructions and data, the whole process
	steps  map[string]float64 // instructions by step (steps)
	fnSelf map[string]float64 // instructions by function, its own (all levels)
	sys    map[string]float64 // system calls by kind; nil when not counted
	bench  benchLine          // the longer run's benchmark line (allocs/op, B/op, scripts/op...)
	strace bool
	// redisIr is redis-server's own instructions per request (callgrind
	// on the server during the strace runs), -1 when not measured.
	redisIr float64
}

type measurer struct {
	opts   options
	bin    string
	strace bool
}

// isRequestCode is every function but the Go runtime's (runtime.*,
// internal/runtime/*, sync.*), as docs/bench.md's second round counts
// it: what a request's own code runs, the allocator, the scheduler and
// the collector left out.
func isRequestCode(f string) bool {
	return !strings.HasPrefix(f, "runtime.") && !strings.HasPrefix(f, "internal/runtime/") && !strings.HasPrefix(f, "sync.")
}

// measure runs r's two lengths under callgrind, then under strace.
func (m *measurer) measure(r row) (*result, error) {
	n := m.opts.n
	if r.tls {
		n = m.opts.tlsN
	}
	res := &result{row: r, n: n, steps: map[string]float64{}, redisIr: -1}
	var ps [2]*profile
	for i, k := range n {
		var p *profile
		var bl benchLine
		kept := m.kept(fmt.Sprintf("%s.%d.cg", r.name, k), fmt.Sprintf("%s.%d.log", r.name, k))
		err := m.withRedis(r, !kept, "", func(extraEnv []string) (err error) {
			p, bl, err = callgrindRun(m.bin, m.opts.dir, r.name, r.bench, k, kept, extraEnv)
			return err
		})
		if err != nil {
			return nil, err
		}
		ps[i], res.bench = p, bl
	}
	d := float64(n[1] - n[0])
	per := func(f func(p *profile) int64) float64 { return float64(f(ps[1])-f(ps[0])) / d }
	ir := ps[0].event("Ir")
	res.ir = per(func(p *profile) int64 { return p.total(ir) })
	res.irReq = per(func(p *profile) int64 { return p.selfWhere(ir, isRequestCode) })
	var misses []int
	for _, e := range []string{"ILmr", "DLmr", "DLmw"} {
		if i := ps[0].event(e); i >= 0 {
			misses = append(misses, i)
		}
	}
	res.ll = per(func(p *profile) int64 {
		var s int64
		for _, i := range misses {
			s += p.total(i)
		}
		return s
	})
	for _, s := range steps {
		res.steps[s.name] = per(func(p *profile) int64 { return s.count(p, ir) })
	}
	res.fnSelf = map[string]float64{}
	for f, c := range ps[1].self {
		var before int64
		if c0 := ps[0].self[f]; c0 != nil {
			before = c0[ir]
		}
		res.fnSelf[withoutLevel(f)] += float64(c[ir]-before) / d
	}
	if !m.strace {
		return res, nil
	}
	var calls [2]map[string]int64
	for i, k := range n {
		var c map[string]int64
		kept := m.kept(fmt.Sprintf("%s.%d.strace", r.name, k))
		err := m.withRedis(r, !kept, redisCG(m.opts.dir, r, k), func(extraEnv []string) (err error) {
			c, err = straceRun(m.bin, m.opts.dir, r.name, r.bench, k, kept, extraEnv)
			return err
		})
		if err != nil {
			return nil, err
		}
		calls[i] = c
	}
	res.strace = true
	res.sys = map[string]float64{}
	for kind, c := range calls[1] {
		res.sys[kind] = float64(c-calls[0][kind]) / d
	}
	if r.redis {
		res.redisIr = redisInstructions(m.opts.dir, r, n)
	}
	return res, nil
}

// kept says whether -reuse is on and every named file of -dir is there:
// the run that wrote them is not run again.
func (m *measurer) kept(names ...string) bool {
	if !m.opts.reuse {
		return false
	}
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(m.opts.dir, n)); err != nil {
			return false
		}
	}
	return true
}

// redisCG is the callgrind file of redis-server in r's strace run of n
// requests (the benchmark's process under strace, not valgrind), "" for
// a row without Redis.
func redisCG(dir string, r row, n int) string {
	if !r.redis {
		return ""
	}
	return filepath.Join(dir, fmt.Sprintf("%s.redis.%d.cg", r.name, n))
}

// redisInstructions is redis-server's own instructions per request, -1
// when its callgrind files are missing or unreadable (the report says
// not measured).
func redisInstructions(dir string, r row, n [2]int) float64 {
	var ir [2]int64
	for i, k := range n {
		f, err := os.Open(redisCG(dir, r, k))
		if err != nil {
			return -1
		}
		p, err := parseCallgrind(f)
		f.Close()
		if err != nil || p.event("Ir") < 0 {
			return -1
		}
		ir[i] = p.total(p.event("Ir"))
	}
	return float64(ir[1]-ir[0]) / float64(n[1]-n[0])
}

// withRedis runs f, for a row on Redis with a fresh redis-server of its
// own, started here and named to the benchmark by
// VENDORGATE_BENCH_REDIS_PORT: under valgrind the benchmark's process
// cannot start one (callgrind stops on the child's start and signals).
// With redisCG set, that server runs under callgrind, writing redisCG
// (the benchmark's process then must not: one valgrind at a time).
func (m *measurer) withRedis(r row, running bool, redisCG string, f func(extraEnv []string) error) error {
	if !r.redis || !running {
		return f(nil)
	}
	rs, err := startRedis(m.opts.dir, redisCG)
	if err != nil {
		return err
	}
	err = f([]string{"VENDORGATE_BENCH_REDIS_PORT=" + strconv.Itoa(rs.Port)})
	if serr := stopRedis(rs, redisCG != ""); err == nil {
		err = serr
	}
	return err
}
