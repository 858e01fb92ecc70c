package main

import (
	"context"
	"fmt"
	"path/filepath"

	"vendorgate/bench/internal/product"
)

// withBaseline puts the baseline row right after the gateway row (or
// first among the gateways), so that the two are measured next to each
// other in every repetition.
func withBaseline(rows []string) []string {
	for _, r := range rows {
		if r == rowBaseline {
			return rows
		}
	}
	out := make([]string, 0, len(rows)+1)
	placed := false
	for _, r := range rows {
		if !placed && (r == rowGatewayRedis || r == rowNginx || r == rowHAProxy) {
			out, placed = append(out, rowBaseline), true
		}
		out = append(out, r)
		if r == rowGateway {
			out, placed = append(out, rowBaseline), true
		}
	}
	if !placed {
		out = append(out, rowBaseline)
	}
	return out
}

// buildBaseline builds the gateway of -baseline from its commit (git
// archive into the temporary directory), so that a change to the request
// path is measured against the commit it changes in one interleaved run.
func (b *bench) buildBaseline() {
	if b.root == "" {
		b.baselineSkip = "the vendorgate checkout was not found: run from bench/"
		return
	}
	dir := filepath.Join(b.dir, "baseline")
	b.logf("building ./cmd/gateway at %s", b.opts.baseline)
	commit, err := product.BuildAt(context.Background(), b.root, dir, b.opts.baseline, "gateway")
	if err != nil {
		b.baselineSkip = fmt.Sprintf("the gateway at %s does not build: %s", b.opts.baseline, lastLine([]byte(err.Error())))
		return
	}
	b.baselineBin, b.baselineCommit = filepath.Join(dir, "gateway"), commit
}

// againstBaseline compares row 3 with row 3b in each cell: req/s as the
// median of the per-repetition ratios, and CPU per request of each.
func (res *results) againstBaseline() []string {
	if res.baseline == "" {
		return nil
	}
	var lines []string
	for _, c := range res.opts.cells() {
		s, bs := res.cells[rowGateway][c], res.cells[rowBaseline][c]
		if s == nil || bs == nil {
			continue
		}
		v, ok := s.ratio(bs)
		if !ok {
			continue
		}
		line := fmt.Sprintf("- this checkout's gateway against the gateway at %s (%s), in-process limiter, %s, %d conns: %.2f× its req/s",
			res.opts.baseline, res.baseline[:12], c.load, c.conns, v)
		m, mok := s.median()
		bm, bok := bs.median()
		if mok && bok && m.CPUOK && bm.CPUOK {
			line += fmt.Sprintf(", CPU per request %s against %s", perRequest(m.ProxyCPU, m.OK), perRequest(bm.ProxyCPU, bm.OK))
		}
		lines = append(lines, line)
	}
	return lines
}
