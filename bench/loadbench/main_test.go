package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"vendorgate/bench/internal/wrk"
)

// TestMain lets the test binary play the responder and the bare proxy, as
// the loadbench binary does when it re-executes itself.
func TestMain(m *testing.M) {
	if ok, err := runRole(); ok {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// tableRPS returns the req/s column of the table line of label at load
// and conns, or -1 when the table has no such line.
func tableRPS(t *testing.T, table, label, load string, conns int) float64 {
	t.Helper()
	prefix := fmt.Sprintf("| %s | %s | %d | ", label, load, conns)
	for _, line := range strings.Split(table, "\n") {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			f, _, _ := strings.Cut(rest, " |")
			v, err := strconv.ParseFloat(f, 64)
			if err != nil {
				t.Fatalf("req/s of %q: %v", line, err)
			}
			return v
		}
	}
	return -1
}

func runSmoke(t *testing.T, args ...string) (stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := run(ctx, args, &out, &errOut)
	if err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, errOut.String())
	}
	return out.String(), errOut.String()
}

// TestSmoke runs the tool for 2 seconds per row and load on the rows that
// need no external package (wrk is used when installed, vegeta otherwise)
// and wants each in the table with traffic on both loads, the floods
// measured on the gateway rows, and the document written.
func TestSmoke(t *testing.T) {
	doc := filepath.Join(t.TempDir(), "bench.md")
	ids := "backend,bare,gateway"
	_, err := exec.LookPath("redis-server")
	withRedis := err == nil
	if withRedis {
		ids += ",gateway-redis,gateway-redis-lease1"
	}
	table, progress := runSmoke(t, "-duration", "1s", "-reps", "1", "-conns", "16", "-many-conns", "16", "-many-keys", "200",
		"-flood-conns", "8", "-warmup", "0", "-rows", ids, "-keys", "100", "-latency-duration", "0", "-out", doc,
		"-real-vendors", "20", "-real-duration", "2s")
	rows := []string{rowLabel(rowBackend), rowLabel(rowBare)}
	gatewayBuilt := !strings.Contains(table, "skipped: the gateway does not build")
	if !gatewayBuilt {
		t.Logf("gateway rows skipped: the gateway does not build here")
	} else {
		rows = append(rows, rowLabel(rowGateway))
		if withRedis {
			rows = append(rows, rowLabel(rowGatewayRedis), rowLabel(rowRedisNoLease))
			checkLeaseReport(t, table)
			if !strings.Contains(table, "**Redis calls per request**") {
				t.Errorf("no Redis calls per request:\n%s", table)
			}
		}
	}
	for _, label := range rows {
		for _, load := range []string{loadMany, loadOne} {
			if v := tableRPS(t, table, label, load, 16); v <= 0 {
				t.Errorf("row %q, %s: req/s %v, want > 0\ntable:\n%s\nprogress:\n%s", label, load, v, table, progress)
			}
		}
	}
	if !strings.Contains(table, "| 1.00 |") {
		t.Errorf("the bare proxy's ratio to itself is missing:\n%s", table)
	}
	if !strings.Contains(table, " µs |") {
		t.Errorf("no CPU per request in the table:\n%s", table)
	}
	if gatewayBuilt {
		if !strings.Contains(table, "with 100 keys cached") {
			t.Errorf("no memory figure for the gateway:\n%s", table)
		}
		gateways := []string{rowGateway}
		if withRedis {
			gateways = append(gateways, rowGatewayRedis)
		}
		for _, id := range gateways {
			over := floodLine(t, table, rowLabel(id), floodOver)
			// answers/s and 429/s are both positive: every answer a 429.
			if len(over) < 10 || over[2] == "0" || over[3] == "0" || over[3] == "–" || !strings.HasPrefix(over[4], "429: ") {
				t.Errorf("%s, %s: %q, want 429s only\n%s", id, floodOver, over, table)
			}
			unknown := floodLine(t, table, rowLabel(id), floodUnknown)
			if len(unknown) < 10 || unknown[2] == "0" || unknown[7] != "0.00" {
				t.Errorf("%s, %s: %q, want answers and no backend lookup\n%s", id, floodUnknown, unknown, table)
			}
			if id == rowGatewayRedis && !strings.Contains(table, "requests: 0 (met), as the gateway's "+redisCallsMetric) {
				t.Errorf("%s, %s: want 0 limiter calls to Redis while the denial is remembered\n%s", id, floodOver, table)
			}
		}
	}
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), "# Load benchmark") || !strings.Contains(string(b), table) {
		t.Errorf("document does not hold the header and the table:\n%s", b)
	}
}

// floodLine is the cells of the flood table's line of label and kind.
func floodLine(t *testing.T, table, label, kind string) []string {
	t.Helper()
	prefix := fmt.Sprintf("| %s | %s | ", label, kind)
	for _, line := range strings.Split(table, "\n") {
		if strings.HasPrefix(line, prefix) {
			cells := strings.Split(strings.Trim(line, "|"), "|")
			for i := range cells {
				cells[i] = strings.TrimSpace(cells[i])
			}
			return cells
		}
	}
	t.Errorf("no flood line %q in\n%s", prefix, table)
	return nil
}

// The tools are never installed unless asked: by default a missing tool
// is a skipped row with a line saying how to install it.
func TestMissingToolSkips(t *testing.T) {
	o, err := parseOptions(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.install {
		t.Fatal("-install defaults to on")
	}
	b := &bench{opts: o, progress: io.Discard}
	bin, note := b.tool("loadbench-no-such-tool", "no-such-package")
	if bin != "" || !strings.Contains(note, "not installed (apt-get install -y no-such-package") {
		t.Errorf("tool() = %q, %q", bin, note)
	}
}

// TestSmokeVegeta drives the load with vegeta as a library, the path taken
// where wrk cannot be installed.
func TestSmokeVegeta(t *testing.T) {
	table, _ := runSmoke(t, "-loadgen", "vegeta", "-duration", "1s", "-reps", "1", "-conns", "8", "-warmup", "0",
		"-many-conns", "8", "-many-keys", "50", "-rows", "backend,bare", "-keys", "0", "-latency-duration", "0", "-out", "")
	for _, label := range []string{rowLabel(rowBackend), rowLabel(rowBare)} {
		if v := tableRPS(t, table, label, loadMany, 8); v <= 0 {
			t.Errorf("row %q: req/s %v, want > 0\n%s", label, v, table)
		}
	}
	if !strings.Contains(table, "vegeta") {
		t.Errorf("table does not name vegeta as the load generator:\n%s", table)
	}
}

// A wrk run's errors and non-2xx answers all count as failed, and req/s
// counts 2xx only.
func TestFromWrk(t *testing.T) {
	m := fromWrk(wrk.Summary{Requests: 100000, Elapsed: 2 * time.Second, P50: 210 * time.Microsecond,
		P99: 900 * time.Microsecond, P999: 2500 * time.Microsecond, Read: 1, Status: 3, Timeout: 2})
	if m.RPS != 49998.5 || m.P999 != 2500*time.Microsecond || m.Failed != 6 ||
		m.FailedDetail != "read errors 1, status errors 3, timeout errors 2" {
		t.Errorf("measurement %+v", m)
	}
}

func TestCommandStats(t *testing.T) {
	before := commandStats{"evalsha": 10, "info": 2}
	after := commandStats{"evalsha": 110, "info": 4, "eval": 1}
	d := after.diff(before)
	if d["evalsha"] != 100 || d["eval"] != 1 || d["info"] != 0 || d.total() != 101 || d.scriptCalls() != 101 {
		t.Errorf("diff %v", d)
	}
	if got := d.String(); got != "evalsha=100 eval=1" {
		t.Errorf("String() = %q", got)
	}
}

func TestMedianAndRatio(t *testing.T) {
	m := func(rps float64) *measurement { return &measurement{RPS: rps} }
	row := &series{byRep: []*measurement{m(90), m(50), m(100)}}
	ref := &series{byRep: []*measurement{m(100), m(100), nil}}
	med, ok := row.median()
	if !ok || med.RPS != 90 {
		t.Errorf("median %v %v, want 90", med.RPS, ok)
	}
	// Only repetitions where both ran count: 0.9 and 0.5.
	if r, ok := row.ratio(ref); !ok || math.Abs(r-0.7) > 1e-9 {
		t.Errorf("ratio %v %v, want 0.7", r, ok)
	}
	if _, ok := (&series{byRep: []*measurement{nil}}).median(); ok {
		t.Error("median of no repetition reported ok")
	}
}
