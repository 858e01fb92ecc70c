// Package wrk runs the wrk load generator with one Lua script that prints
// its summary on one line from wrk's done callback (--latency alone prints
// no p99.9 and rounds its figures), and reads that line back.
package wrk

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// marker starts the summary line the script prints.
const marker = "WRKSUMMARY"

// script prints the summary line: whole numbers, latencies in microseconds.
const script = summaryScript

// rotateScript is script plus a request function sending, round robin, one
// request per line of a file, each with that line as the value of one
// header (wrk -- NAME FILE). The requests are formatted once, at init, so a
// request costs wrk a table lookup. It is a file of its own: wrk decides
// before init whether a script's requests are dynamic, and a static one
// (the one-key load) keeps wrk's cheaper path.
const rotateScript = `local reqs = {}
local n, i = 0, 0
init = function(args)
  for line in io.lines(args[2]) do
    if line ~= "" then
      n = n + 1
      reqs[n] = wrk.format(nil, nil, {[args[1]] = line})
    end
  end
  if n == 0 then error("no line in " .. args[2]) end
end
request = function()
  i = i % n + 1
  return reqs[i]
end
` + summaryScript

const summaryScript = `done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("` + marker + ` requests=%d duration_us=%d p50_us=%d p99_us=%d p999_us=%d connect=%d read=%d write=%d status=%d timeout=%d\n",
    summary.requests, summary.duration,
    math.floor(latency:percentile(50)), math.floor(latency:percentile(99)), math.floor(latency:percentile(99.9)),
    e.connect, e.read, e.write, e.status, e.timeout))
end
`

// Runner is the wrk binary and the script, written once into a folder.
type Runner struct {
	bin    string
	script string
	rotate string
}

// New finds wrk on PATH and writes the script into dir.
func New(dir string) (*Runner, error) {
	bin, err := exec.LookPath("wrk")
	if err != nil {
		return nil, fmt.Errorf("wrk not installed (apt-get install -y wrk): %w", err)
	}
	path := filepath.Join(dir, "summary.lua")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		return nil, err
	}
	rotate := filepath.Join(dir, "rotate.lua")
	if err := os.WriteFile(rotate, []byte(rotateScript), 0o644); err != nil {
		return nil, err
	}
	return &Runner{bin: bin, script: path, rotate: rotate}, nil
}

// Load is one closed-loop run: Conns connections over Threads threads,
// each sending the next GET as soon as the previous answer arrived.
type Load struct {
	URL string
	// Header is one "Name: value" header sent with every request ("":
	// none), the API key.
	Header string
	// Rotate, when set, replaces Header: each request carries the next
	// value of the file, round robin (many API keys, each its own vendor).
	Rotate  *Rotation
	Threads int // default 1; at most Conns
	Conns   int
	// Duration is rounded to whole seconds, at least one: wrk's unit.
	Duration time.Duration
	// Env is added to wrk's environment: OPENSSL_CONF, say, to pin the
	// curves of an https:// URL.
	Env []string
}

// Rotation is one header whose value changes with every request: the lines
// of File, in order, round robin.
type Rotation struct {
	Header string // the header's name
	File   string // one value a line
}

// Run runs wrk once. wrk gets its own process group and is killed should
// the caller die, so no load outlives an interrupted tool.
func (r *Runner) Run(ctx context.Context, l Load) (Summary, error) {
	secs := max(int(math.Round(l.Duration.Seconds())), 1)
	threads := min(max(l.Threads, 1), max(l.Conns, 1))
	args := []string{"-t", strconv.Itoa(threads), "-c", strconv.Itoa(l.Conns), "-d", strconv.Itoa(secs) + "s",
		"--timeout", "5s", "--latency"}
	switch {
	case l.Rotate != nil:
		args = append(args, "-s", r.rotate, l.URL, "--", l.Rotate.Header, l.Rotate.File)
	case l.Header != "":
		args = append(args, "-s", r.script, "-H", l.Header, l.URL)
	default:
		args = append(args, "-s", r.script, l.URL)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if len(l.Env) > 0 {
		cmd.Env = append(os.Environ(), l.Env...)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return Summary{}, fmt.Errorf("wrk %s: %w\n%s", l.URL, err, out)
	}
	return Parse(string(out))
}

// Summary is one run's figures as wrk counts them.
type Summary struct {
	Requests int64         // answers read, whatever their status
	Elapsed  time.Duration // wrk's own measured duration
	P50      time.Duration
	P99      time.Duration
	P999     time.Duration
	// Socket errors and timeouts, and Status: answers outside 2xx/3xx.
	Connect, Read, Write, Timeout, Status int64
}

// Errors counts connect, read and write errors and timeouts.
func (s Summary) Errors() int64 { return s.Connect + s.Read + s.Write + s.Timeout }

// RPS counts 2xx/3xx answers per second only: a fast 429 or 503 is not
// throughput.
func (s Summary) RPS() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Requests-s.Status) / s.Elapsed.Seconds()
}

// Failures names the non-zero error counts: "read errors 1, status
// errors 3" ("" when none).
func (s Summary) Failures() string {
	var parts []string
	for _, f := range []struct {
		name string
		n    int64
	}{{"connect", s.Connect}, {"read", s.Read}, {"write", s.Write}, {"status", s.Status}, {"timeout", s.Timeout}} {
		if f.n > 0 {
			parts = append(parts, fmt.Sprintf("%s errors %d", f.name, f.n))
		}
	}
	return strings.Join(parts, ", ")
}

// Parse finds the summary line in wrk's output. It refuses a line without
// a positive duration.
func Parse(out string) (Summary, error) {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), marker+" ")
		if !ok {
			continue
		}
		v := map[string]int64{}
		for _, kv := range strings.Fields(rest) {
			k, s, _ := strings.Cut(kv, "=")
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return Summary{}, fmt.Errorf("wrk output %q: %w", kv, err)
			}
			v[k] = n
		}
		if v["duration_us"] <= 0 {
			return Summary{}, fmt.Errorf("wrk output without a duration: %q", rest)
		}
		us := func(k string) time.Duration { return time.Duration(v[k]) * time.Microsecond }
		return Summary{
			Requests: v["requests"], Elapsed: us("duration_us"),
			P50: us("p50_us"), P99: us("p99_us"), P999: us("p999_us"),
			Connect: v["connect"], Read: v["read"], Write: v["write"], Timeout: v["timeout"], Status: v["status"],
		}, nil
	}
	return Summary{}, fmt.Errorf("no %s line in wrk's output:\n%s", marker, out)
}
