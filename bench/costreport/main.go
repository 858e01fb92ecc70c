// Command costreport counts what a request costs in units the machine
// cannot blur, for the bare fasthttp proxy, the gateway in process and
// the gateway on Redis with leases, over one vendor's request stream and
// 10,000 vendors' round robin, and for a full TLS handshake: callgrind's
// instructions and last-level cache misses (the whole process, and the
// request code without the Go runtime), strace's system calls by kind,
// the benchmark's allocations, Redis' script calls and commands (INFO
// commandstats) and the garbage collections per handshake. It writes
// docs/cost.md of the checkout, and fails when a step of the gateway's
// request spends more instructions than its budget (budgets.txt).
//
// Every figure is a difference of two runs of one benchmark of different
// lengths, divided by the difference in requests: start-up cancels out.
// The benchmarks are gateway's BenchmarkServedSerial and
// BenchmarkHandshakeSerial: one request at a time through the listener,
// so that the counts repeat whatever else the machine runs. valgrind runs
// one at a time (-rows picks some). The tool installs nothing: without
// strace the system calls are left out, with a line saying so.
//
//	cd bench && go run ./costreport            # make bench-cost
//	cd bench && go run ./costreport -rows bare,gateway -out ''
package main

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"vendorgate/bench/internal/product"
)

// budgetTable is the per-step instruction budgets the run is held to.
//
//go:embed budgets.txt
var budgetTable []byte

// row is one measured configuration.
type row struct {
	name  string // -rows, and the budgets' first column
	label string
	bench string // -test.bench
	base  string // the row its ratios are to; "" for a bare proxy
	tls   bool   // a handshake per iteration (-tls-n)
	redis bool   // limits on a redis-server (started by the tool)
}

var rows = []row{
	{"bare", "bare fasthttp proxy", "BenchmarkServedSerial$/^bare$", "", false, false},
	// bare-headers: the bare proxy writing the headers the gateway's
	// answer and backend call carry (the contract's): what any proxy that
	// answers as the gateway does costs at least, its client and backend
	// parsing them included.
	{"bare-headers", "bare fasthttp proxy with the contract's headers", "BenchmarkServedSerial$/^bare-headers$", "bare", false, false},
	{"gateway", "gateway, in process", "BenchmarkServedSerial$/^gateway$", "bare", false, false},
	{"gateway-redis", "gateway, Redis with leases", "BenchmarkServedSerial$/^gateway-redis$", "bare", false, true},
	{"bare-many", "bare fasthttp proxy", "BenchmarkServedSerial$/^bare-many$", "", false, false},
	{"gateway-many", "gateway, in process", "BenchmarkServedSerial$/^gateway-many$", "bare-many", false, false},
	{"gateway-redis-many", "gateway, Redis with leases", "BenchmarkServedSerial$/^gateway-redis-many$", "bare-many", false, true},
	{"tls-bare", "bare fasthttp proxy over TLS", "BenchmarkHandshakeSerial$/^bare$", "", true, false},
	{"tls-gateway", "gateway over TLS, in process", "BenchmarkHandshakeSerial$/^gateway$", "tls-bare", true, false},
}

type options struct {
	out, dir, only string
	n, tlsN        [2]int
	reuse, check   bool
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "costreport:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	var o options
	fs := flag.NewFlagSet("costreport", flag.ContinueOnError)
	fs.StringVar(&o.out, "out", "docs/cost.md", "write the report here, relative to the vendorgate checkout (empty: print only)")
	fs.StringVar(&o.dir, "dir", "", "keep the test binary, callgrind and strace files here (default: a temporary folder, removed)")
	fs.StringVar(&o.only, "rows", "", "measure these rows only, comma-separated (default all: "+rowNames()+")")
	n := fs.String("n", "5000,15000", "the two run lengths of the served rows, in requests")
	tlsN := fs.String("tls-n", "500,1500", "the two run lengths of the handshake rows, in handshakes")
	fs.BoolVar(&o.reuse, "reuse", false, "with -dir, read the files an earlier run left there, running only what is missing (a report rewritten, or a run resumed)")
	fs.BoolVar(&o.check, "check", true, "exit 1 when a step exceeds its budget")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	if o.n, err = pair(*n); err != nil {
		return fmt.Errorf("-n: %w", err)
	}
	if o.tlsN, err = pair(*tlsN); err != nil {
		return fmt.Errorf("-tls-n: %w", err)
	}
	if o.reuse && o.dir == "" {
		return errors.New("-reuse needs -dir")
	}
	budgets, err := parseBudgets(bytes.NewReader(budgetTable))
	if err != nil {
		return err
	}
	picked, err := pick(o.only)
	if err != nil {
		return err
	}
	if _, err := exec.LookPath("valgrind"); err != nil {
		return errors.New("valgrind not found: install it (apt-get install -y valgrind)")
	}
	root, err := product.Root(context.Background())
	if err != nil {
		return err
	}
	if o.dir == "" {
		if o.dir, err = os.MkdirTemp("", "costreport"); err != nil {
			return err
		}
		defer os.RemoveAll(o.dir)
	} else if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return err
	}
	bin := filepath.Join(o.dir, "gateway.test")
	if _, err := os.Stat(bin); err != nil || !o.reuse {
		cmd := exec.Command("go", "test", "-c", "-o", bin, "./gateway")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go test -c ./gateway: %w\n%s", err, out)
		}
	}
	if err := stepsNamed(bin); err != nil {
		return err
	}
	m := &measurer{opts: o, bin: bin, strace: true}
	if _, err := exec.LookPath("strace"); err != nil {
		m.strace = false
		fmt.Fprintln(os.Stderr, "costreport: strace not found: the system calls are left out (apt-get install -y strace)")
	}
	rep := &report{env: collectEnv(root), opts: o}
	if md, err := os.ReadFile(filepath.Join(root, "docs", "bench.md")); err == nil {
		rep.benchMD = string(md)
	}
	for _, r := range picked {
		fmt.Fprintf(os.Stderr, "costreport: %s (%s)\n", r.name, r.bench)
		res, err := m.measure(r)
		if err != nil {
			return err
		}
		rep.results = append(rep.results, res)
	}
	rep.over = overBudget(budgets, rep.perStep())
	rep.budgets = budgets
	text := rep.markdown()
	if o.out == "" {
		fmt.Print(text)
	} else {
		path := product.Path(root, o.out)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			return err
		}
		fmt.Fprintln(os.Stderr, "costreport: wrote", path)
	}
	if len(rep.over) > 0 && o.check {
		return fmt.Errorf("over budget:\n  %s", strings.Join(rep.over, "\n  "))
	}
	return nil
}

func rowNames() string {
	var s []string
	for _, r := range rows {
		s = append(s, r.name)
	}
	return strings.Join(s, ",")
}

// pick is the rows -rows names, in the table's order.
func pick(only string) ([]row, error) {
	if only == "" {
		return rows, nil
	}
	want := map[string]bool{}
	for _, n := range strings.Split(only, ",") {
		want[strings.TrimSpace(n)] = true
	}
	var out []row
	for _, r := range rows {
		if want[r.name] {
			out = append(out, r)
			delete(want, r.name)
		}
	}
	for n := range want {
		return nil, fmt.Errorf("-rows: no row %q (rows: %s)", n, rowNames())
	}
	return out, nil
}

// pair reads "a,b" with 0 < a < b.
func pair(s string) ([2]int, error) {
	a, b, ok := strings.Cut(s, ",")
	x, err1 := strconv.Atoi(strings.TrimSpace(a))
	y, err2 := strconv.Atoi(strings.TrimSpace(b))
	if !ok || err1 != nil || err2 != nil || x <= 0 || y <= x {
		return [2]int{}, fmt.Errorf("%q: want two run lengths, the shorter first", s)
	}
	return [2]int{x, y}, nil
}
