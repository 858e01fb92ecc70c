package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// env is every run's environment beyond the caller's: one P (the
// benchmarks are serial; a second would only add scheduler work),
// asynchronous preemption off (valgrind 3.19 does not know Go's
// signal-based preemption) and RDTSCP hidden (valgrind does not emulate
// it).
var env = []string{"GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off", "GOMAXPROCS=1"}

// caches are the simulated caches, pinned so that the misses do not
// depend on what the host reports (a VM may report a 512 MB L3): an
// AMD Zen 5 core's L1 (32 KB 8-way instructions, 48 KB 12-way data) and
// one CCD's L3 (32 MB 16-way) as the last level. Callgrind simulates two
// levels: the 1 MB L2 between them is not modelled.
var caches = []string{"--I1=32768,8,64", "--D1=49152,12,64", "--LL=33554432,16,64"}

// benchArgs are the test binary's arguments for n iterations of bench.
func benchArgs(bench string, n int) []string {
	return []string{"-test.run=NONE", "-test.bench=" + bench, "-test.benchtime=" + strconv.Itoa(n) + "x", "-test.cpu", "1", "-test.benchmem"}
}

// callgrindRun runs bin's bench for n iterations under callgrind with
// the cache simulation, writing dir/name.n.cg and its output into
// dir/name.n.log; with reuse it reads what an earlier run left there.
// It returns the profile and the benchmark's reported figures.
func callgrindRun(bin, dir, name, bench string, n int, reuse bool, extraEnv []string) (*profile, benchLine, error) {
	out := filepath.Join(dir, fmt.Sprintf("%s.%d.cg", name, n))
	logPath := filepath.Join(dir, fmt.Sprintf("%s.%d.log", name, n))
	if !reuse {
		args := append([]string{"--tool=callgrind", "--cache-sim=yes", "--callgrind-out-file=" + out}, caches...)
		args = append(append(args, bin), benchArgs(bench, n)...)
		if err := runLogged("valgrind", args, extraEnv, logPath); err != nil {
			_ = os.Remove(out) // not kept for -reuse
			return nil, nil, err
		}
	}
	log, err := os.ReadFile(logPath)
	if err != nil {
		return nil, nil, err
	}
	bl, err := parseBenchLine(string(log))
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", logPath, err)
	}
	f, err := os.Open(out)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	p, err := parseCallgrind(f)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", out, err)
	}
	return p, bl, nil
}

// straceRun counts bin's system calls by kind over n iterations of bench
// (strace -f -c: every thread), into dir/name.n.strace; with reuse it
// reads what an earlier run left there.
func straceRun(bin, dir, name, bench string, n int, reuse bool, extraEnv []string) (map[string]int64, error) {
	out := filepath.Join(dir, fmt.Sprintf("%s.%d.strace", name, n))
	if !reuse {
		args := append([]string{"-f", "-c", "-o", out, bin}, benchArgs(bench, n)...)
		if err := runLogged("strace", args, extraEnv, filepath.Join(dir, fmt.Sprintf("%s.%d.strace.log", name, n))); err != nil {
			_ = os.Remove(out) // not kept for -reuse
			return nil, err
		}
	}
	f, err := os.Open(out)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseStrace(f)
}

// runLogged runs prog with env and extraEnv, its output into logPath; a
// failure says where the log is.
func runLogged(prog string, args, extraEnv []string, logPath string) error {
	cmd := exec.Command(prog, args...)
	cmd.Env = append(append(os.Environ(), env...), extraEnv...)
	out, err := cmd.CombinedOutput()
	if werr := os.WriteFile(logPath, out, 0o644); werr != nil && err == nil {
		err = werr
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w (log: %s)", prog, strings.Join(args, " "), err, logPath)
	}
	return nil
}

// benchLine is what a benchmark's result line reports, by unit
// (allocs/op, B/op, scripts/op...).
type benchLine map[string]float64

// parseBenchLine finds the one benchmark result line in a run's output.
func parseBenchLine(out string) (benchLine, error) {
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		bl := benchLine{}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("result line %q: %w", l, err)
			}
			bl[f[i+1]] = v
		}
		return bl, nil
	}
	return nil, fmt.Errorf("no benchmark result line in the output")
}

// parseStrace reads strace -c's table: calls by system call.
func parseStrace(r io.Reader) (map[string]int64, error) {
	out := map[string]int64{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 || f[len(f)-1] == "total" || f[len(f)-1] == "syscall" {
			continue
		}
		if _, err := strconv.ParseFloat(f[0], 64); err != nil {
			continue
		}
		n, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("strace line %q: %w", sc.Text(), err)
		}
		out[f[len(f)-1]] += n
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no system calls in strace's table")
	}
	return out, sc.Err()
}
