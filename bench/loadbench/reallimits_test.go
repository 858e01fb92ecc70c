package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"vendorgate/bench/internal/attack"
)

// hitsAt makes n answers of status code sent at from, every, each taking
// latency.
func hitsAt(n int, code int, from, every, latency time.Duration) []attack.Hit {
	base := time.Unix(1_700_000_000, 0)
	out := make([]attack.Hit, n)
	for i := range out {
		out[i] = attack.Hit{Code: code, Sent: base.Add(from + time.Duration(i)*every), Latency: latency}
	}
	return out
}

// GCRA at 120 a minute admits its burst at once and then one every 0.5 s,
// as redis_rate and the gateway's in-process limiter do.
func TestGCRAAdmits(t *testing.T) {
	burst := make([]time.Duration, 130) // all at t = 0
	if n := gcraAdmits(burst, 120, time.Minute, 120); n != 120 {
		t.Errorf("130 at once, burst 120: %d admitted, want 120", n)
	}
	if n := gcraAdmits(burst, 120, time.Minute, 122); n != 122 {
		t.Errorf("130 at once, burst 122: %d admitted, want 122", n)
	}
	// The burst spent at 0, then one read every 0.4 s for 10 s: 20 more
	// admitted (one per 0.5 s), not 25.
	times := append([]time.Duration(nil), burst[:120]...)
	for i := 1; i <= 25; i++ {
		times = append(times, time.Duration(i)*400*time.Millisecond)
	}
	if n := gcraAdmits(times, 120, time.Minute, 120); n != 140 {
		t.Errorf("burst then 2.5/s for 10 s: %d admitted, want 140", n)
	}
	if got := boundExtra(120, time.Minute, time.Second); got != 2 {
		t.Errorf("ceil(120/min × 1s) = %d, want 2", got)
	}
	if got := boundExtra(120, time.Minute, 2*time.Second); got != 4 {
		t.Errorf("ceil(120/min × 2s) = %d, want 4", got)
	}
}

// replayVendors counts answers by status and flags each vendor's 200s that
// GCRA with the bound's burst would not have admitted, at the times they
// were answered.
func TestReplayVendors(t *testing.T) {
	hits := [][]attack.Hit{
		// Within the bound: 122 at once.
		hitsAt(122, http.StatusOK, 0, 0, time.Millisecond),
		// Over it by one: 123 at once, then 429s and failures.
		append(append(hitsAt(123, http.StatusOK, 0, 0, time.Millisecond),
			hitsAt(5, http.StatusTooManyRequests, 0, 0, time.Millisecond)...),
			hitsAt(2, http.StatusServiceUnavailable, 0, 0, time.Millisecond)...),
		// Sent 0.5 s apart but answered together: the answers count.
		append(hitsAt(122, http.StatusOK, 0, 0, time.Millisecond), attack.Hit{Code: http.StatusOK,
			Sent: time.Unix(1_700_000_000, 0).Add(-time.Second), Latency: time.Second + time.Millisecond}),
		// At the rate for a minute: nothing outside.
		hitsAt(120, http.StatusOK, 0, 500*time.Millisecond, time.Millisecond),
		{{Code: 0, Sent: time.Unix(1_700_000_000, 0)}},
	}
	c := replayVendors(hits, 120, time.Minute, 2)
	if c.burst != 122 || c.outside != 2 {
		t.Errorf("burst %d, outside %d, want 122 and 2", c.burst, c.outside)
	}
	if c.offered != 122+130+123+120+1 || c.ok != 122+123+123+120 || c.denied != 5 || c.other != 3 ||
		c.others[503] != 2 || c.others[0] != 1 || c.otherList() != "no answer: 1, 503: 2" {
		t.Errorf("counts %+v (%s)", c, c.otherList())
	}
	// Plain GCRA of what was offered, by send time: 120 of the first
	// vendor's, 120 of the second's, 121 of the third's (one sent a second
	// earlier), 120 of the fourth's, 1 of the fifth's.
	if c.ideal != 120+120+121+120+1 {
		t.Errorf("ideal %d, want %d", c.ideal, 120+120+121+120+1)
	}
}

// The real-limits load is on by default with the shape, the
// lease_ttl 1s row is known but not measured unless asked, and nonsense is
// refused.
func TestRealLimitsOptions(t *testing.T) {
	o, err := parseOptions(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !o.realLimits || o.realVendors != 1000 || o.realRate != 2 || o.realDuration != 20*time.Second {
		t.Errorf("defaults %v %d %d %s", o.realLimits, o.realVendors, o.realRate, o.realDuration)
	}
	rows := strings.Join(o.rows, ",")
	if !strings.Contains(rows, "gateway-redis,gateway-redis-lease1,nginx") || strings.Contains(rows, rowRedisTTL1) {
		t.Errorf("default rows %s", rows)
	}
	if o, err := parseOptions([]string{"-rows", "gateway-redis,gateway-redis-ttl1"}, io.Discard); err != nil || len(o.rows) != 2 {
		t.Errorf("-rows with the lease_ttl 1s row: %v %v", o.rows, err)
	}
	if _, err := parseOptions([]string{"-real-rate", "0"}, io.Discard); err == nil {
		t.Error("-real-rate 0 accepted")
	}
	if _, err := parseOptions([]string{"-real-rate", "0", "-real-limits=false"}, io.Discard); err != nil {
		t.Errorf("-real-rate 0 without the load: %v", err)
	}
	if got := leaseSettings(rowRedisNoLease) + leaseSettings(rowRedisTTL1) + leaseSettings(rowGatewayRedis); got != "redis:\n  lease_max: 1\nredis:\n  lease_ttl: 1s\n" {
		t.Errorf("lease settings %q", got)
	}
}
