// Command redisrule sweeps the rule by which a gateway calls Redis down:
// it runs the real gateway binary (this checkout's, and a baseline
// commit's) against a real redis-server, offers load, and in each cell
// (busy loops, a CPU quota on the gateway, Redis on the same cores or on
// its own, Redis over TLS, real outages) records every answer's code, the
// false 503s (503 rate_limit_unavailable while Redis answered within
// redis.timeout as Redis itself measured it: no outage injected and no
// command in its slowlog at redis.timeout or more), and for an outage the
// time from the outage to the first 503 rate_limit_unavailable.
//
// Run from bench/: go run ./redisrule (make sweep-redis at the root, which
// writes the table into docs/bench-history.md, "When is Redis down: the
// sweep").
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"vendorgate/bench/internal/product"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "redisrule:", err)
		os.Exit(1)
	}
}

type options struct {
	cellFor  time.Duration
	workers  int
	baseline string
	// limitsBaseline is the before of the cells of other limits than
	// GCRA (cell.limit): baseline predates them.
	limitsBaseline string
	only           string
	write          string
	waitLoad       float64
	waitFor        time.Duration
}

// redisTimeout is the gateways' redis.timeout (the default): the slowlog
// threshold that tells a false 503 from a slow Redis.
const redisTimeout = 50 * time.Millisecond

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("redisrule", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.DurationVar(&o.cellFor, "cell", 6*time.Second, "how long load is offered in each cell")
	fs.IntVar(&o.workers, "workers", 16, "closed-loop clients offering load")
	fs.StringVar(&o.baseline, "baseline", "6ed8b42", "a commit whose gateway runs each cell too (before); empty: none")
	fs.StringVar(&o.limitsBaseline, "limits-baseline", "9a03081", "the before of the quota, window and concurrency cells (their calls not yet through the limiter's transport); empty: none")
	fs.StringVar(&o.only, "only", "", "comma-separated cell names to run (default: all)")
	fs.StringVar(&o.write, "write", "", "a markdown file whose redisrule section (between its markers) the table replaces")
	fs.Float64Var(&o.waitLoad, "wait-load", 1.5, "wait until the 1-minute load average is below this before the sweep (0: do not wait)")
	fs.DurationVar(&o.waitFor, "wait-for", 10*time.Minute, "the longest wait for -wait-load")
	if err := fs.Parse(args); err != nil {
		return err
	}
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, "redisrule: "+format+"\n", a...) }
	root, err := product.Root(ctx)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "redisrule-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cells := allCells()
	if o.only != "" {
		var some []cell
		for _, name := range strings.Split(o.only, ",") {
			c, ok := findCell(cells, strings.TrimSpace(name))
			if !ok {
				return fmt.Errorf("no cell %q", name)
			}
			some = append(some, c)
		}
		cells = some
	}
	// The builds: a before of each kind of cell selected (GCRA, the other
	// limits), and the checkout's.
	var before, limitsBefore []build
	for _, c := range cells {
		at, dst, into := o.baseline, "before", &before
		if c.limit != "" {
			at, dst, into = o.limitsBaseline, "before-limits", &limitsBefore
		}
		if at == "" || len(*into) > 0 {
			continue
		}
		logf("building ./cmd/gateway at %s", at)
		commit, err := product.BuildAt(ctx, root, filepath.Join(dir, dst), at, "gateway")
		if err != nil {
			return err
		}
		*into = []build{{name: "before " + commit[:7], bin: filepath.Join(dir, dst, "gateway")}}
	}
	logf("building ./cmd/gateway of the checkout")
	if err := product.Build(ctx, root, dir, "gateway"); err != nil {
		return err
	}
	after := build{name: "after " + headOf(root), bin: filepath.Join(dir, "gateway")}
	builds := append(append(append([]build{}, before...), limitsBefore...), after)
	be, err := newBackend(o.workers)
	if err != nil {
		return err
	}
	defer be.close()
	loadBefore := waitForLoad(ctx, o.waitLoad, o.waitFor, logf)
	started := time.Now()
	var results []result
	for i, c := range cells {
		bs := append(before, after)
		if c.limit != "" {
			bs = append(limitsBefore, after)
		}
		for _, b := range bs { // interleaved: both builds meet the same machine in turn
			if ctx.Err() != nil {
				return ctx.Err()
			}
			r, err := runCell(ctx, filepath.Join(dir, fmt.Sprintf("cell%02d-%s", i, strings.Fields(b.name)[0])), c, b, be, o)
			if err != nil {
				return fmt.Errorf("cell %s, %s: %w", c.name, b.name, err)
			}
			logf("%s", r.line())
			results = append(results, r)
		}
	}
	env := environment(loadBefore, loadAverage(), time.Since(started), o, builds)
	table := report(results, env)
	fmt.Fprint(stdout, table)
	if o.write != "" {
		return writeSection(product.Path(root, o.write), table)
	}
	return nil
}

// build is one gateway binary under test.
type build struct{ name, bin string }

func headOf(root string) string {
	out, err := exec.Command("git", "-C", root, "rev-parse", "--short=7", "HEAD").Output()
	if err != nil {
		return "checkout"
	}
	s := strings.TrimSpace(string(out))
	if st, _ := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output(); len(st) > 0 {
		s += "+changes"
	}
	return s
}

// loadAverage is the 1-minute load average.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// waitForLoad waits up to d for the 1-minute load to fall below below,
// and returns the load it starts at.
func waitForLoad(ctx context.Context, below float64, d time.Duration, logf func(string, ...any)) float64 {
	if below <= 0 {
		return loadAverage()
	}
	deadline := time.Now().Add(d)
	for l := loadAverage(); l >= below; l = loadAverage() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			logf("load %.2f still at or above %.2f after %s: running anyway", l, below, d)
			return l
		}
		logf("load %.2f: waiting for it to fall below %.2f", l, below)
		select {
		case <-ctx.Done():
		case <-time.After(15 * time.Second):
		}
	}
	return loadAverage()
}
