package main

import (
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"vendorgate/shared/testredis"
)

// startRedis starts the private redis-server of row 4 in dir/redis.
func startRedis(dir string) (*testredis.Server, error) {
	return testredis.Run(testredis.Options{Dir: filepath.Join(dir, "redis")})
}

// redisVersion is redis_version from INFO server.
func redisVersion(r *testredis.Server) string {
	s, err := r.Command("INFO", "server")
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return "?"
}

// commandStats is calls per command from INFO commandstats.
type commandStats map[string]int64

// readCommandStats reads Redis' own per-command call counters.
// reads is total_reads_processed of INFO stats: socket reads of client
// input, one per round trip, fewer than the calls when they are pipelined.
// Both come from one INFO call, which is itself one read.
func readCommandStats(r *testredis.Server) (stats commandStats, reads int64, err error) {
	s, err := r.Command("INFO", "commandstats", "stats")
	if err != nil {
		return nil, 0, fmt.Errorf("redis INFO commandstats stats: %w", err)
	}
	return parseCommandStats(s), parseReads(s), nil
}

// parseReads finds total_reads_processed in INFO stats.
func parseReads(s string) int64 {
	for _, line := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_reads_processed:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// parseCommandStats parses lines like
// "cmdstat_evalsha:calls=12,usec=34,usec_per_call=2.8,...".
func parseCommandStats(s string) commandStats {
	out := commandStats{}
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err == nil {
					out[strings.TrimPrefix(name, "cmdstat_")] = n
				}
			}
		}
	}
	return out
}

// diff is after minus before, without the INFO calls loadbench itself made.
func (after commandStats) diff(before commandStats) commandStats {
	out := commandStats{}
	for k, v := range after {
		if k == "info" {
			continue
		}
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

func (c commandStats) total() int64 {
	var n int64
	for _, v := range c {
		n += v
	}
	return n
}

// scriptCalls counts script invocations: each is one round trip.
func (c commandStats) scriptCalls() int64 {
	var n int64
	for k, v := range c {
		if isScriptCommand(k) {
			n += v
		}
	}
	return n
}

func isScriptCommand(k string) bool {
	switch k {
	case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro":
		return true
	}
	return false
}

// String lists the commands, most called first: "evalsha=123 ping=1".
func (c commandStats) String() string {
	names := make([]string, 0, len(c))
	for k := range c {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		if c[names[i]] != c[names[j]] {
			return c[names[i]] > c[names[j]]
		}
		return names[i] < names[j]
	})
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s=%d", k, c[k])
	}
	return strings.Join(parts, " ")
}
