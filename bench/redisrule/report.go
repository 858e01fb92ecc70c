package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// Markers of the section of a markdown file the table replaces.
const (
	beginMarker = "<!-- redisrule:begin (bench/redisrule writes this part) -->"
	endMarker   = "<!-- redisrule:end -->"
)

func environment(loadBefore, loadAfter float64, took time.Duration, o options, builds []build) string {
	kernel, _ := exec.Command("uname", "-r").Output()
	redis, _ := exec.Command("redis-server", "--version").Output()
	var names []string
	for _, b := range builds {
		names = append(names, b.name)
	}
	return fmt.Sprintf("%d cores, Linux %s, %s; builds %s; %s per cell, %d closed-loop clients; "+
		"load average %.2f at the start, %.2f at the end; the sweep took %s.",
		runtime.NumCPU(), strings.TrimSpace(string(kernel)), strings.Fields(string(redis) + " ? ?")[2],
		strings.Join(names, ", "), o.cellFor, o.workers, loadBefore, loadAfter, took.Round(time.Second))
}

func report(rs []result, env string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\n", env)
	b.WriteString("| cell | build | answers/s | 200 | 429 | 503 unavailable | 503 shed | other | false 503 | Redis slowlog ≥ 50 ms (longest command) | outage → first 503 unavailable | longest wait after the outage |\n")
	b.WriteString("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range rs {
		worst := "–"
		if r.cell.outage != "" {
			worst = fmt.Sprintf("%d ms", r.worst.Milliseconds())
		}
		fmt.Fprintf(&b, "| %s | %s | %.0f | %d | %d | %d | %d | %d | **%d** | %d (%d ms) | %s | %s |\n",
			r.cell.name, r.build, float64(r.answers)/r.seconds, r.counts[kindOK], r.counts[kindLimited],
			r.counts[kindUnavailable], r.counts[kindShed], r.counts[kindOther], r.false503, r.slowlog, r.longest,
			r.detectCell(), worst)
	}
	return b.String()
}

// writeSection replaces what lies between the markers in the file at
// path with table.
func writeSection(path, table string) error {
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(old)
	i, j := strings.Index(s, beginMarker), strings.Index(s, endMarker)
	if i < 0 || j < i {
		return fmt.Errorf("%s has no redisrule markers", path)
	}
	s = s[:i+len(beginMarker)] + "\n" + table + s[j:]
	return os.WriteFile(path, []byte(s), 0o644)
}
