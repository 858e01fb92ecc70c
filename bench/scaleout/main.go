// Command scaleout starts the scaled-out vendorgate stack on loopback (one
// PostgreSQL server, a Redis Cluster of three masters, two backends on one
// database, two gateways balancing over both backends and limiting in the
// cluster) and measures it: throughput and p99 per gateway under wrk, then
// whether a vendor's read limit stays exact across both gateways. It prints
// a table and writes docs/scaleout.md.
//
//	cd bench && go run ./scaleout                 # 10 s load, writes docs/scaleout.md
//	cd bench && go run ./scaleout -d 2s -out ''   # quick look, no file
//
// Everything it starts is stopped when it ends, also on Ctrl-C, and the whole
// run is bounded (-timeout, under three minutes).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"vendorgate/bench/internal/product"
)

// options are scaleout's flags.
type options struct {
	load         time.Duration // each wrk run
	conns        int           // wrk connections per gateway
	limitFor     time.Duration // the limit-exactness run
	workers      int           // its concurrent clients per gateway
	failFor      time.Duration // each part down in the failure run; 0: none
	redisTimeout time.Duration
	binDir       string // prebuilt gateway and backend; empty: build them
	out          string // markdown report; empty: none
	timeout      time.Duration
}

func main() {
	var o options
	flag.DurationVar(&o.load, "d", 10*time.Second, "throughput run length (wrk -d), both gateways at once")
	flag.IntVar(&o.conns, "c", 64, "wrk connections per gateway (one wrk thread each)")
	flag.DurationVar(&o.limitFor, "limit-d", 4*time.Second, "limit-exactness run length")
	flag.IntVar(&o.workers, "limit-workers", 8, "concurrent clients per gateway in the limit-exactness run")
	flag.DurationVar(&o.failFor, "fail-d", 4*time.Second, "how long each part is down in the failure run (0: no failure run)")
	flag.DurationVar(&o.redisTimeout, "redis-timeout", 250*time.Millisecond, "GATEWAY_REDIS_TIMEOUT (the default 50ms is for a quiet production host; every process here shares the CPUs with wrk)")
	flag.StringVar(&o.binDir, "bin", "", "folder holding prebuilt gateway and backend binaries (default: go build them)")
	flag.StringVar(&o.out, "out", "docs/scaleout.md", "markdown report to write, relative to the vendorgate checkout (empty: none)")
	flag.DurationVar(&o.timeout, "timeout", 170*time.Second, "bound on the whole run")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := run(ctx, o, os.Stdout); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("interrupted; every process it started has been stopped")
		}
		fmt.Fprintln(os.Stderr, "scaleout:", err)
		os.Exit(1)
	}
}

// result is one run's figures.
type result struct {
	env        environment
	load       []throughput
	limit      exactness
	failures   []failure
	started    time.Time
	loadBefore string
	loadAfter  string
	o          options
}

// run starts the stack, measures it, prints the table to w and writes the
// report; it stops everything it started before it returns.
func run(ctx context.Context, o options, w io.Writer) (*result, error) {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	dir, err := os.MkdirTemp("", "vendorgate-scaleout")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)

	// The checkout holds the binaries' source and docs/; -out is relative
	// to it.
	root, err := product.Root(ctx)
	if err != nil && (o.binDir == "" || (o.out != "" && !filepath.IsAbs(o.out))) {
		return nil, err
	}
	out := product.Path(root, o.out)
	res := &result{started: time.Now().UTC(), o: o, loadBefore: loadavg()}
	s := &stack{dir: dir, bins: o.binDir}
	defer s.stop()
	if s.bins == "" {
		s.bins = filepath.Join(dir, "bin")
		fmt.Fprintln(w, "building gateway and backend ...")
		if err := product.Build(ctx, root, s.bins, "gateway", "backend"); err != nil {
			return nil, err
		}
	}
	fmt.Fprintln(w, "starting PostgreSQL, a 3-master Redis Cluster, 2 backends, 2 gateways ...")
	if err := s.startPostgres(); err != nil {
		return nil, err
	}
	if err := s.startCluster(); err != nil {
		return nil, err
	}
	if err := s.startBackends(ctx); err != nil {
		return nil, err
	}
	// The throughput vendor exists before the gateways start so that its
	// override (a read limit no run reaches) is in their file; every other
	// vendor keeps the default 120 reads a minute.
	loadVendor, loadKey, err := s.newVendor(ctx, "Scaleout Throughput Inc")
	if err != nil {
		return nil, err
	}
	if err := s.startGateways(ctx, gatewayYAML(loadVendor), o.redisTimeout); err != nil {
		return nil, err
	}
	res.env = describe(ctx, s)

	fmt.Fprintf(w, "throughput: wrk -t1 -c%d -d%s against each gateway at once ...\n", o.conns, o.load)
	// One short warm-up fills each gateway's key cache and connection pools.
	if _, err := runWrk(ctx, dir, s.gws, loadKey, 4, time.Second); err != nil {
		return nil, err
	}
	if res.load, err = runWrk(ctx, dir, s.gws, loadKey, o.conns, o.load); err != nil {
		return nil, err
	}

	_, limitKey, err := s.newVendor(ctx, "Scaleout Limits Inc")
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "limit exactness: %d clients per gateway for %s on one vendor's default read limit ...\n", o.workers, o.limitFor)
	res.limit = hammer(ctx, s.gws, limitKey, o.workers, o.limitFor, 120, time.Minute)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res.loadAfter = loadavg()

	if o.failFor > 0 {
		_, spare, err := s.newVendor(ctx, "Scaleout Spare Inc")
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(w, "failures: one backend, PostgreSQL, one Redis master, each down for %s (Redis for the gateways' lease_ttl, %s, more) ...\n", o.failFor, leaseTTL)
		if res.failures, err = runFailures(ctx, s, loadVendor, loadKey, spare, o.failFor); err != nil {
			return nil, err
		}
	}

	fmt.Fprintln(w)
	fmt.Fprint(w, res.table())
	if out != "" {
		if err := os.WriteFile(out, []byte(res.markdown()), 0o644); err != nil {
			return nil, err
		}
		fmt.Fprintln(w, "wrote", out)
	}
	return res, nil
}

// gatewayYAML is both gateways' configuration file: default limits, and a
// read limit no run reaches for the throughput vendor.
func gatewayYAML(loadVendor string) string {
	return fmt.Sprintf(`limits:
  vendor:
    reads:  {rate: 120, period: 1m}
    orders: {rate: 10, period: 1m}
  overrides:
    %q:
      reads:  {rate: 100000000, period: 1m}
      orders: {rate: 10, period: 1m}
`, loadVendor)
}
