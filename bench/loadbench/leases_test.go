package main

import (
	"strconv"
	"strings"
	"testing"
)

// checkLeaseReport wants the smoke run's "Leases" section: buckets charged
// per request read from each Redis row's /metrics (exactly one per request
// without leases), and the real-limits load on both rows, every read
// answered 200 within the bound.
func checkLeaseReport(t *testing.T, table string) {
	t.Helper()
	_, section, ok := strings.Cut(table, "\n### Leases\n")
	if !ok {
		t.Fatalf("no Leases section:\n%s", table)
	}
	find := func(prefix string) []string {
		for _, line := range strings.Split(section, "\n") {
			if strings.HasPrefix(line, prefix) {
				cs := strings.Split(strings.Trim(line, "|"), "|")
				for i := range cs {
					cs[i] = strings.TrimSpace(cs[i])
				}
				return cs
			}
		}
		return nil
	}
	cells := func(prefix string) []string {
		c := find(prefix)
		if c == nil {
			t.Errorf("no line %q in\n%s", prefix, section)
		}
		return c
	}
	// row, load, conns, req/s, × bare, × in-process, CPU, Redis CPU,
	// scripts, buckets charged, from leases.
	// The requests in flight when the load stops are charged but not
	// counted: at most one a connection more than one a request, over
	// the smoke run's 1 s. (A loaded machine served 724 requests in that
	// second, so 16 in flight read 1.02 a request.)
	if c := cells("| " + rowLabel(rowRedisNoLease) + " | " + loadMany + " |"); len(c) == 11 {
		conns, _ := strconv.ParseFloat(c[2], 64)
		rps, _ := strconv.ParseFloat(c[3], 64)
		charged, err := strconv.ParseFloat(c[9], 64)
		if most := 1 + conns/max(rps, 1) + 0.005; err != nil || charged < 0.995 || charged > most || c[10] != "0%" {
			t.Errorf("lease_max 1: %q, want 1 bucket charged per request (at most %.3f with the %v requests in flight at the end), none from leases", c, most, conns)
		}
	}
	if c := cells("| " + rowLabel(rowGatewayRedis) + " | " + loadMany + " |"); len(c) == 11 && (c[9] == "–" || c[5] == "–") {
		t.Errorf("row 4: %q, want buckets charged and the ratio to the in-process row", c)
	}
	// row, requests, 200, 429, other, charged, from leases, CPU, Redis,
	// burst, outside, share.
	for id, burst := range map[string]string{rowGatewayRedis: "124", rowRedisNoLease: "124"} {
		// The lease table's lines name a load after the label; the
		// real-limits table's a number of requests (20 vendors × 2/s × 2 s).
		c := find("| " + rowLabel(id) + " | 7")
		if c == nil {
			c = cells("| " + rowLabel(id) + " | 8")
		}
		if len(c) == 12 && (c[1] != c[2] || c[3] != "0" || c[4] != "0" || c[9] != burst || c[10] != "0" || c[11] != "100.00%") {
			t.Errorf("real limits on %s: %q, want every read answered 200 within the bound", id, c)
		}
	}
	if !strings.Contains(section, "real limits (20 vendors): every 200 within GCRA with burst 124: 0 outside (met)") {
		t.Errorf("no real-limits bound target:\n%s", section)
	}
}

func TestShellArgs(t *testing.T) {
	if got := shellArgs([]string{"-conns", "", "-rows", "a,b", "-x", "it's"}); got != `-conns '' -rows a,b -x 'it'\''s'` {
		t.Errorf("shellArgs = %s", got)
	}
}
