// Command loadbench is vendorgate's load benchmark. It starts everything it
// measures itself, on loopback: one fixed JSON responder (the backend of
// every row), a bare fasthttp proxy, the vendorgate gateway with its
// in-process limiter and with Redis limiting, nginx and HAProxy. It then
// drives each with wrk (or vegeta as a library when wrk is missing) at
// several connection counts with two loads (10,000 keys round robin, each
// its own vendor, the headline; and one key), interleaving the rows within
// each repetition, and prints one table of the medians: requests/s, p50,
// p99 and p99.9, each row's ratio to the bare proxy and to nginx, and the
// CPU per request of each row's processes and of its Redis. It also reads
// Redis' INFO commandstats for Redis calls per request, floods each
// gateway with one vendor far over its limit and with unknown keys from one
// address, measures the gateway's added p99 at half its peak rate (vegeta,
// constant rate), and the gateway's RSS with 10,000 more keys cached. It
// installs nothing unless -install is given: a missing tool skips its row. `make bench-load` runs it (from bench/:
// go run ./loadbench) and writes docs/bench.md of the checkout.
package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"vendorgate/bench/internal/childproc"
	"vendorgate/bench/internal/product"
	"vendorgate/bench/internal/wrk"
	"vendorgate/shared/apikey"
)

func main() {
	if ok, err := runRole(); ok {
		if err != nil {
			fmt.Fprintln(os.Stderr, "loadbench:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "loadbench:", err)
		stop()
		os.Exit(1)
	}
}

// options are the command-line flags.
type options struct {
	duration        time.Duration
	warmup          time.Duration
	reps            int
	conns           []int
	manyConns       []int
	manyKeys        int
	floodConns      int
	rows            []string
	loadgen         string
	threads         int
	out             string
	gateway         string
	keys            int
	latencyDuration time.Duration
	install         bool
	baseline        string
	maxTime         time.Duration
	pressure        []string
	baselineGateway string
	realLimits      bool
	realVendors     int
	realRate        int
	realDuration    time.Duration
	sweep           []int
	sweepWarmup     time.Duration
	sweepDuration   time.Duration
	sweepPushedTTL  time.Duration
	sweepHeap       string
	sweepMemLimit   string
	// -tls: the TLS rows alone, written to tlsOut.
	tls            bool
	tlsOut         string
	tlsProfile     string
	tlsGOGC        string
	handshakeConns int
	handshakeMax   int
	args           []string
}

// sweepOnly: -sweep without the main table's loads.
func (o options) sweepOnly() bool { return len(o.sweep) > 0 && len(o.conns)+len(o.manyConns) == 0 }

func parseOptions(args []string, stderr io.Writer) (options, error) {
	o := options{args: args}
	fs := flag.NewFlagSet("loadbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&o.duration, "duration", 4*time.Second, "length of one measured run (one row at one connection count)")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured load on each row before the first repetition")
	fs.IntVar(&o.reps, "reps", 3, "repetitions; the table shows the median of each row")
	conns := fs.String("conns", "16,64,256", "connection counts of the one-key load, comma-separated (\"\": none)")
	manyConns := fs.String("many-conns", "64", "connection counts of the many-vendor load, comma-separated (\"\": none)")
	fs.IntVar(&o.manyKeys, "many-keys", 10000, "keys of the many-vendor load, each its own vendor, sent round robin")
	fs.IntVar(&o.floodConns, "flood-conns", 64, "connections of the flood runs on the gateway rows (0: skip them)")
	rows := fs.String("rows", strings.Join(defaultRows(), ","), "rows to measure, comma-separated, of "+strings.Join(allRows(), ","))
	fs.StringVar(&o.loadgen, "loadgen", "auto", "load generator: wrk, vegeta, or auto (wrk when installed or installable, else vegeta)")
	fs.IntVar(&o.threads, "threads", 1, "wrk threads (-t): 1 leaves the other core(s) to the proxy under test")
	fs.StringVar(&o.out, "out", "docs/bench.md", "write the results here as markdown, relative to the vendorgate checkout (empty: print only)")
	fs.StringVar(&o.gateway, "gateway", "", "gateway binary (default: built from the checkout's ./cmd/gateway into a temporary directory)")
	fs.IntVar(&o.keys, "keys", 10000, "distinct keys sent through each gateway after the runs for the memory figure (0: skip)")
	fs.DurationVar(&o.latencyDuration, "latency-duration", 4*time.Second, "length of the constant-rate runs at half of row 4's peak (0: skip)")
	fs.StringVar(&o.baseline, "baseline", "", "a git revision (HEAD~1, main, a commit) whose gateway is built into a temporary directory and measured beside this checkout's as row 3b, in-process limiter; it joins -rows after the gateway row")
	fs.BoolVar(&o.install, "install", false, "apt-get install nginx, haproxy, wrk when missing (off: a missing tool skips its row)")
	fs.DurationVar(&o.maxTime, "max-time", 12*time.Minute, "stop starting new runs past this time and report what was measured")
	pressure := fs.String("pressure", "", "after the table, run the gateway rows without and under CPU pressure, Redis healthy: busy (one more spinning process than cores), quota (the gateway alone at 0.3 CPU, cgroup v1), comma-separated (\"\": none)")
	fs.StringVar(&o.baselineGateway, "baseline-gateway", "", "another gateway binary (say, main's) measured as one more Redis-limited row, for a before/after in one run")
	realLimitsFlags(fs, &o)
	sweep := fs.String("sweep", "", "active key counts of the vendor-count sweep, comma-separated, for example 1000,10000,100000 (\"\": none); with -conns '' -many-conns '' the sweep alone runs and replaces its section of -out")
	fs.DurationVar(&o.sweepWarmup, "sweep-warmup", 35*time.Second, "unmeasured round-robin load of each sweep cell after its two passes over the keys (past key_cache.ttl)")
	fs.DurationVar(&o.sweepPushedTTL, "sweep-pushed-ttl", 0, "the gateways' key_cache.pushed_ttl (0: their default, 15m): shorter, so that a sweep sees keys refreshed while invalidations are pushed")
	fs.StringVar(&o.sweepHeap, "sweep-heap", "", "a directory where each sweep cell's gateway heap profile (heap-KEYS-ROW.pb.gz, after a collection) and runtime memory statistics (heap-KEYS-ROW.txt) are written at the end of its measured run (\"\": none)")
	fs.StringVar(&o.sweepMemLimit, "sweep-gomemlimit", "", "GOMEMLIMIT of every gateway this run starts, meant for a sweep alone (for example 150MiB; \"\": none): the operator setting that trades GC CPU for RSS")
	fs.DurationVar(&o.sweepDuration, "sweep-duration", 30*time.Second, "measured load of each sweep cell (at least key_cache.ttl, so that a cache without pushes expires each key once in it)")
	fs.BoolVar(&o.tls, "tls", false, "measure TLS alone: the bare proxy, the gateway (in-process limiter) and nginx, each over plain HTTP and over TLS (one ECDSA P-256 certificate, P-256 key exchange), keep-alive (wrk, the first of -conns) and a new connection per request (full handshakes), interleaved; writes -tls-out")
	fs.StringVar(&o.tlsOut, "tls-out", "docs/bench-tls.md", "with -tls, write the results here, relative to the vendorgate checkout (empty: print only)")
	fs.StringVar(&o.tlsProfile, "tls-profile", "", "with -tls, a directory where CPU profiles of the bare proxy and gateway rows under each load (and the gateways' heap profiles) are written after the rounds (\"\": none)")
	fs.StringVar(&o.tlsGOGC, "tls-gogc", "", "with -tls, GOGC of the bare proxy and the gateway (\"\": Go's default, 100): the same GC pacing for both whatever their live heaps")
	fs.IntVar(&o.handshakeConns, "handshake-conns", 8, "with -tls, connections in flight of the new-connection load")
	fs.IntVar(&o.handshakeMax, "handshake-max", 20000, "with -tls, at most this many connections per run of the new-connection load")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if *sweep != "" {
		var err error
		if o.sweep, err = parseCounts("-sweep", *sweep); err != nil {
			return o, err
		}
	}
	for _, m := range strings.Split(*pressure, ",") {
		switch m = strings.TrimSpace(m); m {
		case "":
		case pressureBusy, pressureQuota:
			o.pressure = append(o.pressure, m)
		default:
			return o, fmt.Errorf("-pressure: %q is not busy or quota", m)
		}
	}
	var err error
	if o.conns, err = parseCounts("-conns", *conns); err != nil {
		return o, err
	}
	if o.manyConns, err = parseCounts("-many-conns", *manyConns); err != nil {
		return o, err
	}
	if len(o.conns)+len(o.manyConns) == 0 && len(o.sweep) == 0 {
		return o, errors.New("-conns and -many-conns are both empty: nothing to measure")
	}

	if len(o.manyConns) > 0 && o.manyKeys < 2 {
		return o, errors.New("-many-keys must be at least 2 (or -many-conns '')")
	}
	known := map[string]bool{}
	for _, r := range allRows() {
		known[r] = true
	}
	for _, s := range strings.Split(*rows, ",") {
		s = strings.TrimSpace(s)
		if !known[s] {
			return o, fmt.Errorf("-rows: unknown row %q (rows: %s)", s, strings.Join(allRows(), ","))
		}
		o.rows = append(o.rows, s)
	}
	if o.baseline != "" {
		o.rows = withBaseline(o.rows)
	}
	if o.sweepOnly() || o.tls {
		o.rows = nil // the sweep and -tls start their own
	}
	if o.tls && (len(o.sweep) > 0 || o.baseline != "" || o.baselineGateway != "" || len(o.pressure) > 0) {
		return o, errors.New("-tls runs alone: without -sweep, -baseline, -baseline-gateway and -pressure")
	}
	if o.tls && (o.handshakeConns < 1 || o.handshakeMax < 1) {
		return o, errors.New("-handshake-conns and -handshake-max must be at least 1")
	}
	if o.reps < 1 || o.duration < time.Second {
		return o, errors.New("-reps must be at least 1 and -duration at least 1s")
	}
	if err := o.checkRealLimits(); err != nil {
		return o, err
	}
	switch o.loadgen {
	case "auto", "wrk", "vegeta":
	default:
		return o, fmt.Errorf("-loadgen: %q is not wrk, vegeta or auto", o.loadgen)
	}
	return o, nil
}

// parseCounts reads a comma-separated list of positive numbers.
func parseCounts(flagName, list string) ([]int, error) {
	var out []int
	if strings.TrimSpace(list) == "" {
		return nil, nil
	}
	for _, s := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s: %q is not a positive number", flagName, s)
		}
		out = append(out, n)
	}
	return out, nil
}

// bench is one run of the benchmark and everything it started.
type bench struct {
	opts       options
	loadBefore string
	dir        string
	root       string // the vendorgate checkout; "" when not found
	self       string
	progress   io.Writer
	started    time.Time

	token   string
	signing string // the gateways' key-signing secret, random per run
	// one is the key of the one-key load, many the keys of the
	// many-vendor load (each its own vendor), memKeys the keys sent after
	// the runs for the memory figure, flood the key of a vendor with a
	// limit of one request an hour, unknown well-formed keys whose MAC no
	// gateway accepts.
	one, many, unknown *keySet
	memKeys            []string
	sweepKeys          []string // the vendor-count sweep's, the largest count of them
	flood              *keySet
	real               *keySet // the vendors of the real-limits load
	floodVendor        string
	meBody             []byte
	backendAddr        string
	responder          *childproc.Proc

	gatewayBin  string
	gatewaySkip string
	// baselineBin is the gateway of -baseline, baselineCommit its commit.
	baselineBin, baselineSkip, baselineCommit string

	gen  loadGenerator
	rows []*row

	// -tls: the certificate and the client's configuration, and what each
	// TLS row negotiated.
	tlsKit    *tlsKit
	tlsClient *tls.Config
	tlsStates []string
}

// run is the whole benchmark; stdout gets the table, stderr the progress.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	opts, err := parseOptions(args, stderr)
	if err != nil {
		return err
	}
	b := &bench{opts: opts, progress: stderr, started: time.Now(), loadBefore: loadAverage()}
	// The checkout holds the gateway's source and docs/; -out is relative
	// to it. Without it loadbench still measures what needs no gateway.
	b.root, _ = product.Root(ctx)
	out := opts.out
	if out != "" && !filepath.IsAbs(out) {
		if b.root == "" {
			return fmt.Errorf("-out %s: the vendorgate checkout was not found (run from bench/, or give an absolute path)", out)
		}
		out = product.Path(b.root, out)
	}
	raiseFileLimit()
	if b.self, err = os.Executable(); err != nil {
		return err
	}
	if b.dir, err = os.MkdirTemp("", "loadbench"); err != nil {
		return err
	}
	defer os.RemoveAll(b.dir)
	defer b.stopAll()

	if err := b.setup(); err != nil {
		return err
	}
	if opts.sweepOnly() {
		return b.sweepAlone(ctx, out, stdout, stderr)
	}
	if opts.tls {
		tlsOut := opts.tlsOut
		if tlsOut != "" && !filepath.IsAbs(tlsOut) {
			if b.root == "" {
				return fmt.Errorf("-tls-out %s: the vendorgate checkout was not found (run from bench/, or give an absolute path)", tlsOut)
			}
			tlsOut = product.Path(b.root, tlsOut)
		}
		return b.tlsAlone(ctx, tlsOut, stdout, stderr)
	}
	res, err := b.measure(ctx)
	if err != nil {
		return err
	}
	if err := b.floods(ctx, res); err != nil {
		return err
	}
	if err := b.pressureRuns(ctx, res); err != nil {
		return err
	}
	if err := b.extras(ctx, res); err != nil {
		return err
	}
	if err := b.realLimitsRuns(ctx, res); err != nil {
		return err
	}
	if err := b.sweep(ctx, res); err != nil {
		return err
	}
	res.env = collectEnv(b)
	res.baseline = b.baselineCommit
	report := res.markdown() + res.sweepTable()
	if _, err := io.WriteString(stdout, report); err != nil {
		return err
	}
	if out != "" {
		doc := res.document(report)
		if old, err := os.ReadFile(out); err == nil {
			doc = spliceSweep(doc, string(old)) // a run without -sweep keeps the last sweep
			doc += keptSection(string(old))
		}
		if err := os.WriteFile(out, []byte(doc), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", out, err)
		}
		fmt.Fprintf(stderr, "wrote %s\n", out)
	}
	return nil
}

func (b *bench) logf(format string, a ...any) {
	fmt.Fprintf(b.progress, "[%5.1fs] ", time.Since(b.started).Seconds())
	fmt.Fprintf(b.progress, format+"\n", a...)
}

func (b *bench) has(id string) bool {
	for _, r := range b.opts.rows {
		if r == id {
			return true
		}
	}
	return false
}

// setup makes the keys, picks the load generator, and starts the
// responder and every row.
func (b *bench) setup() error {
	tok := make([]byte, 24)
	if _, err := rand.Read(tok); err != nil {
		return err
	}
	b.token = hex.EncodeToString(tok)
	sec := make([]byte, 32)
	if _, err := rand.Read(sec); err != nil {
		return err
	}
	b.signing = hex.EncodeToString(sec)
	if err := b.makeKeys(); err != nil {
		return err
	}
	if err := b.pickLoadgen(); err != nil {
		return err
	}
	if err := b.startResponder(); err != nil {
		return err
	}
	if b.has(rowGateway) || b.has(rowGatewayRedis) || len(b.realRows()) > 0 || len(b.opts.sweep) > 0 {
		b.findGateway()
	}
	if b.has(rowBaseline) {
		b.buildBaseline()
	}
	ids := b.opts.rows
	if b.opts.baselineGateway != "" {
		ids = append(append([]string(nil), ids...), rowGatewayRedisBase)
	}
	for _, id := range ids {
		var r *row
		var err error
		switch id {
		case rowBackend:
			r = &row{id: rowBackend, url: "http://" + b.backendAddr + mePath}
		case rowBare:
			r, err = b.startBareProxy()
		case rowGateway:
			r, err = b.startGateway(rowGateway, false)
		case rowBaseline:
			r, err = b.startGateway(rowBaseline, false)
		case rowGatewayRedis, rowRedisNoLease, rowRedisTTL1, rowRedisQuota, rowRedisQuotaLease, rowRedisSlot:
			r, err = b.startGateway(id, true)
		case rowGatewayRedisBase:
			r, err = b.startBaselineGateway()
		case rowNginx:
			r, err = b.startNginx()
		case rowHAProxy:
			r, err = b.startHAProxy()
		}
		if r != nil {
			b.rows = append(b.rows, r)
		}
		if err != nil {
			return fmt.Errorf("start %s: %w", rowLabel(id), err)
		}
		if r.skip == "" {
			if err := b.check(r); err != nil {
				r.stop()
				r.skip = err.Error()
			}
		}
		if r.skip != "" {
			b.logf("%s: skipped: %s", r.label(), r.skip)
		} else {
			b.logf("%s: ready at %s", r.label(), r.url)
		}
	}
	return nil
}

func (b *bench) stopAll() {
	for i := len(b.rows) - 1; i >= 0; i-- {
		b.rows[i].stop()
	}
	b.responder.Stop(5 * time.Second)
}

// makeKeys generates the keys, signed as the backend signs them, and the
// responder's file of their hashes: every key is its own vendor (index i,
// vendorID(i)), so the many-vendor load also spreads over as many limiter
// buckets. Signing in process makes 10,000 keys take milliseconds, where
// the backend's admin API would take minutes.
func (b *bench) makeKeys() error {
	signer, err := apikey.NewSigner([]string{b.signing})
	if err != nil {
		return err
	}
	var sb strings.Builder
	next := 0
	gen := func(n int) ([]string, error) {
		out := make([]string, n)
		for i := range out {
			k, err := signer.Generate(apikey.DefaultPrefixes(), apikey.Sandbox)
			if err != nil {
				return nil, err
			}
			out[i] = k
			sb.WriteString(apikey.Hash(k))
			sb.WriteByte(' ')
			sb.WriteString(strconv.Itoa(next))
			sb.WriteByte('\n')
			next++
		}
		return out, nil
	}
	one, err := gen(1)
	if err != nil {
		return err
	}
	flood, err := gen(1)
	if err != nil {
		return err
	}
	b.floodVendor = vendorID(1)
	many, err := gen(max(b.opts.manyKeys, 2))
	if err != nil {
		return err
	}
	if b.memKeys, err = gen(max(b.opts.keys, 0)); err != nil {
		return err
	}
	var real []string
	if b.opts.realLimits {
		if real, err = gen(b.opts.realVendors); err != nil {
			return err
		}
	}
	if len(b.opts.sweep) > 0 {
		if b.sweepKeys, err = gen(slices.Max(b.opts.sweep)); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(b.dir, "keys.txt"), []byte(sb.String()), 0o600); err != nil {
		return err
	}
	// Unknown keys: well formed, signed with another secret.
	other := make([]byte, 32)
	if _, err := rand.Read(other); err != nil {
		return err
	}
	foreign, err := apikey.NewSigner([]string{hex.EncodeToString(other)})
	if err != nil {
		return err
	}
	unknown := make([]string, max(b.opts.manyKeys, 2))
	for i := range unknown {
		if unknown[i], err = foreign.Generate(apikey.DefaultPrefixes(), apikey.Sandbox); err != nil {
			return err
		}
	}
	if b.one, err = b.keySet("one vendor", one); err != nil {
		return err
	}
	if b.flood, err = b.keySet("flood", flood); err != nil {
		return err
	}
	if b.many, err = b.keySet("many vendors", many); err != nil {
		return err
	}
	if len(real) > 0 {
		if b.real, err = b.keySet("real limits", real); err != nil {
			return err
		}
	}
	b.unknown, err = b.keySet("unknown keys", unknown)
	return err
}

// keySet writes keys to a file of their own for wrk.
func (b *bench) keySet(name string, keys []string) (*keySet, error) {
	file := filepath.Join(b.dir, "keys-"+strconv.Itoa(len(keys))+"-"+strings.ReplaceAll(name, " ", "-")+".txt")
	if err := os.WriteFile(file, []byte(strings.Join(keys, "\n")+"\n"), 0o600); err != nil {
		return nil, err
	}
	return &keySet{name: name, keys: keys, file: file}, nil
}

func (b *bench) pickLoadgen() error {
	switch b.opts.loadgen {
	case "vegeta":
		b.gen = vegetaGen{}
		return nil
	case "wrk":
		if bin, note := b.tool("wrk", "wrk"); bin == "" {
			return errors.New(note)
		}
	case "auto":
		if bin, note := b.tool("wrk", "wrk"); bin == "" {
			b.logf("%s: using vegeta as a library instead", note)
			b.gen = vegetaGen{}
			return nil
		}
	}
	r, err := wrk.New(b.dir)
	if err != nil {
		return err
	}
	b.gen = &wrkGen{runner: r, threads: max(b.opts.threads, 1)}
	return nil
}

func (b *bench) startResponder() error {
	addr, err := childproc.FreeAddr()
	if err != nil {
		return err
	}
	p, err := childproc.Start(b.dir, "responder", []string{envRole + "=" + roleResponder, envListen + "=" + addr,
		envKeysFile + "=" + filepath.Join(b.dir, "keys.txt"), envToken + "=" + b.token}, b.self)
	if err != nil {
		return err
	}
	b.responder, b.backendAddr = p, addr
	if err := p.WaitTCP(addr, 10*time.Second); err != nil {
		return err
	}
	status, body, err := fasthttp.Get(nil, "http://"+addr+mePath)
	if err != nil || status != fasthttp.StatusOK {
		return fmt.Errorf("responder: GET %s: %d %v", mePath, status, err)
	}
	b.meBody = body
	return nil
}

// findGateway uses -gateway, or builds ./cmd/gateway of the checkout so
// the figures are of the source at hand, not of a stale bin/.
func (b *bench) findGateway() {
	if b.opts.gateway != "" {
		abs, err := filepath.Abs(b.opts.gateway)
		if err == nil {
			_, err = os.Stat(abs)
		}
		if err != nil {
			b.gatewaySkip = "gateway binary: " + err.Error()
			return
		}
		b.gatewayBin = abs // children run in the temporary directory
		return
	}
	if b.root == "" {
		b.gatewaySkip = "the vendorgate checkout was not found: run from bench/"
		return
	}
	b.logf("building ./cmd/gateway")
	if err := product.Build(context.Background(), b.root, b.dir, "gateway"); err != nil {
		b.gatewaySkip = fmt.Sprintf("the gateway does not build: %s", lastLine([]byte(err.Error())))
		return
	}
	b.gatewayBin = filepath.Join(b.dir, "gateway")
}

// raiseFileLimit lifts the soft open-file limit to the hard one for this
// process and its children: HAProxy refuses a maxconn the limit cannot
// hold, and 256 connections through a proxy need twice as many sockets.
func raiseFileLimit() {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < lim.Max {
		lim.Cur = lim.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
}
