package main

import (
	"fmt"
	"path/filepath"
	"sort"
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
	info := testredis.ParseInfo(s)
	n, _ := info.Sum("total_reads_processed")
	return info.Calls(), int64(n), nil
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
