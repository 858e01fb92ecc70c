package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// usageTop is `vendorctl usage top -o json`.
type usageTop struct {
	Window  string `json:"window"`
	Vendors []struct {
		VendorID      string `json:"vendor_id"`
		CompanyName   string `json:"company_name"`
		Limit         string `json:"limit"`
		Quota         int    `json:"quota"`
		PeriodSeconds int64  `json:"period_seconds"`
		Allowed       uint64 `json:"allowed"`
		Limited       uint64 `json:"limited"`
		ShadowLimited uint64 `json:"shadow_limited"`
		PeakPerMinute uint64 `json:"peak_per_minute"`
	} `json:"vendors"`
}

type usageCounts struct{ allowed, limited, shadow uint64 }

func (s *stack) usageOf(vendorID, limit string) (usageCounts, bool) {
	s.t.Helper()
	var top usageTop
	decode(s.t, s.mustVendorctl("-o", "json", "usage", "top", "--window", "1h", "--top", "50"), &top)
	for _, v := range top.Vendors {
		if v.VendorID == vendorID && v.Limit == limit {
			return usageCounts{v.Allowed, v.Limited, v.ShadowLimited}, true
		}
	}
	return usageCounts{}, false
}

// waitUsage polls the usage view until vendorID's counts of limit are
// want, for at most within; it fails with the last counts seen.
func (s *stack) waitUsage(vendorID, limit string, want usageCounts, within time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(within)
	var got usageCounts
	for {
		got, _ = s.usageOf(vendorID, limit)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("usage of %s %s = %+v, want %+v (within %s)", vendorID, limit, got, want, within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Two gateways on one Redis, at the shipped lease settings (redis.lease_max
// 16, redis.lease_ttl 2 s), count one vendor over its limit and one under
// it with a shadow twin tighter than its limit; vendorctl shows both within
// a flush interval; a Redis restart loses nothing and counts nothing twice.
// The counts are what docs/limits.md says of them under leases ("Counts
// under leases"): exact, every request counted once (allowed + limited =
// requests answered, allowed = the 200s) and the view's refusals the
// gateways' own decisions summed; within the lease bound, the decisions
// themselves: at most what GCRA with a burst of burst + ceil(rate ×
// lease_ttl) admits, and at least what plain GCRA admits less the lease
// tokens that went back unspent (a token one gateway held can make the
// other refuse early).
func TestUsageViewAcrossReplicas(t *testing.T) {
	// Not parallel: it reads the usage view within a flush interval and counts refills over the run.
	const flush = 1 * time.Second
	// The view is read within a flush interval; the race-built binaries on
	// a shared machine get a second more to run vendorctl and the flush.
	within := flush + 2*time.Second
	s := newStack(t, stackOptions{persistentRedis: true, gateways: 2,
		gatewayEnv: map[string]string{"GATEWAY_USAGE_FLUSH_INTERVAL": flush.String()},
		gatewayYAML: `limits:
  vendor:
    reads: {rate: 20, period: 10m, shadow_twin: {rate: 10, period: 10m}}
    orders: {rate: 10, period: 10m}
`})
	over, overKey := s.newVendor("sandbox", "mvr")
	under, underKey := s.newVendor("sandbox", "mvr")

	// The vendor over its limit: 30 reads, alternating between the gateways.
	before := s.leaseCounts()
	codes := map[int]int{}
	start := time.Now()
	for i := 0; i < 30; i++ {
		codes[s.me(i%2, overKey).status]++
	}
	elapsed := time.Since(start)
	if codes[200]+codes[429] != 30 {
		t.Fatalf("vendor over its limit got %v, want only 200s and 429s", codes)
	}
	phase := s.leasesSettled(before)
	if phase.granted == 0 {
		t.Fatalf("no lease was granted for 30 reads over two gateways: %+v (the test is of counts under leases)", phase)
	}
	// 20 in 10m refill a token every 30 s; the bound's burst is 20 +
	// ceil(20 × 2 s / 10m) = 21.
	refilled := int(elapsed / (30 * time.Second))
	if lo, hi := 20-phase.back(), 21+refilled; codes[200] < lo || codes[200] > hi {
		t.Fatalf("vendor over its limit: %d of 30 allowed, want %d to %d (leases: %+v)", codes[200], lo, hi, phase)
	}
	t.Logf("vendor over its limit: %v in %s; leases %+v", codes, elapsed.Round(time.Millisecond), phase)
	s.waitUsage(over, "reads", usageCounts{allowed: uint64(codes[200]), limited: uint64(codes[429]), shadow: uint64(phase.shadow)}, within)
	if phase.limited != codes[429] {
		t.Fatalf("the gateways counted %d refusals of the vendor over its limit, it got %d 429s", phase.limited, codes[429])
	}

	// The vendor under its limit: 15 reads; the twin (10 in 10m) would
	// refuse 5 of them under plain GCRA, and never refuses one.
	before = s.leaseCounts()
	for i := 0; i < 15; i++ {
		if r := s.me(i%2, underKey); r.status != 200 {
			t.Fatalf("request %d of the vendor under its limit: %d %s (a shadow twin must never refuse)", i, r.status, r.body)
		}
	}
	phase = s.leasesSettled(before)
	shadow := phase.shadow
	if lo, hi := 15-11, 5+phase.back(); shadow < lo || shadow > hi {
		t.Fatalf("the twin refused %d of 15, want %d to %d (leases: %+v)", shadow, lo, hi, phase)
	}
	t.Logf("vendor under its limit: twin refused %d of 15; leases %+v", shadow, phase)
	s.waitUsage(under, "reads", usageCounts{allowed: 15, shadow: uint64(shadow)}, within)
	var top usageTop
	decode(t, s.mustVendorctl("-o", "json", "usage", "top"), &top)
	if len(top.Vendors) == 0 || top.Vendors[0].VendorID != over || top.Vendors[0].Limit != "reads" ||
		top.Vendors[0].Quota != 20 || top.Vendors[0].PeriodSeconds != 600 || !strings.HasPrefix(top.Vendors[0].CompanyName, "Acme") {
		t.Fatalf("the most refused vendor does not lead the top list: %+v", top.Vendors)
	}

	var show struct {
		VendorID    string `json:"vendor_id"`
		CompanyName string `json:"company_name"`
		Policies    []struct {
			Limit   string `json:"limit"`
			Minutes []struct {
				A uint64 `json:"allowed"`
				S uint64 `json:"shadow_limited"`
			} `json:"minutes"`
		} `json:"policies"`
	}
	decode(t, s.mustVendorctl("-o", "json", "usage", "show", under, "--window", "15m"), &show)
	var a, sh uint64
	for _, p := range show.Policies {
		if p.Limit == "reads" {
			if len(p.Minutes) != 15 {
				t.Fatalf("a 15m window has %d minutes", len(p.Minutes))
			}
			for _, m := range p.Minutes {
				a, sh = a+m.A, sh+m.S
			}
		}
	}
	if show.VendorID != under || show.CompanyName == "" || a != 15 || sh != uint64(shadow) {
		t.Fatalf("usage show: %+v (allowed %d, shadow %d)", show, a, sh)
	}
	table := s.mustVendorctl("usage", "show", under)
	if !strings.Contains(table, "per minute") || !strings.Contains(table, fmt.Sprintf("shadow-limited %d", shadow)) {
		t.Fatalf("usage show table:\n%s", table)
	}

	// Counted, then Redis killed before they are flushed: the gateways
	// keep them and flush them once Redis is back, once. A flush runs on
	// each boundary of the interval and sends nothing when nothing was
	// counted, so the reads go out well after one (a flush a little late
	// on a loaded machine has run by then) and Redis stops right after
	// them. Should a flush later still than that have taken them first,
	// nothing was pending and nothing could fail: the round runs once more
	// (two reads a round keep the vendor under its 20).
	allowed, failed := 15, 0.0
	for round := 1; failed == 0; round++ {
		if round > 2 {
			t.Fatal("no failed flush was counted while Redis was down, in 2 rounds")
		}
		before = s.leaseCounts()
		now := time.Now()
		time.Sleep(now.Truncate(flush).Add(flush + 2*flush/5).Sub(now))
		for i := 0; i < 2; i++ {
			if r := s.me(i%2, underKey); r.status != 200 {
				t.Fatalf("before the restart: %d %s", r.status, r.body)
			}
		}
		allowed += 2
		s.redis.Stop()
		shadow += s.leaseCounts().minus(before).shadow
		time.Sleep(2*flush + 500*time.Millisecond) // flushes fail meanwhile
		s.redis.Restart(t)
		s.waitUsage(under, "reads", usageCounts{allowed: uint64(allowed), shadow: uint64(shadow)}, 2*within)
		for _, adm := range s.gwAdmin {
			// No series (-1) is none failed.
			failed += max(metric(scrape(t, adm), "vendorgate_gateway_usage_flushes_total", `result="error"`), 0)
		}
	}

	// Bad input is one clear line and a non-zero exit.
	for args, want := range map[string]string{
		"usage top --window 25h":                          "--window",
		"usage show 00000000-0000-4000-8000-000000000000": "no vendor",
	} {
		if _, err := s.vendorctl(strings.Fields(args)...); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("vendorctl %s: %v, want an error naming %q", args, err, want)
		}
	}
	resp, err := http.Get(s.gwAdmin[0] + "/usage")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("/usage without the token answered %d, want 401", resp.StatusCode)
	}
}

// decisionCounts are the gateways' own counters, summed over them: reads
// refused and refused by the twin (vendorgate_gateway_limiter_decisions_total),
// and lease tokens (vendorgate_gateway_limiter_lease_tokens_total; admitted:
// requests admitted from leases).
type decisionCounts struct{ limited, shadow, granted, admitted, refunded, dropped int }

func (s *stack) leaseCounts() decisionCounts {
	s.t.Helper()
	var c decisionCounts
	for _, adm := range s.gwAdmin {
		m := scrape(s.t, adm)
		get := func(name string, labels ...string) int { return max(int(metric(m, name, labels...)), 0) }
		c.limited += get("vendorgate_gateway_limiter_decisions_total", `limit="reads"`, `outcome="limited"`)
		c.shadow += get("vendorgate_gateway_limiter_decisions_total", `limit="reads"`, `outcome="shadow_limited"`)
		c.granted += get("vendorgate_gateway_limiter_lease_tokens_total", `event="granted"`)
		c.admitted += get("vendorgate_gateway_limiter_lease_admissions_total")
		c.refunded += get("vendorgate_gateway_limiter_lease_tokens_total", `event="refunded"`)
		c.dropped += get("vendorgate_gateway_limiter_lease_tokens_total", `event="dropped"`)
	}
	return c
}

func (c decisionCounts) minus(b decisionCounts) decisionCounts {
	return decisionCounts{c.limited - b.limited, c.shadow - b.shadow, c.granted - b.granted,
		c.admitted - b.admitted, c.refunded - b.refunded, c.dropped - b.dropped}
}

// back is the lease tokens that went back to Redis, or were lost, unspent.
func (c decisionCounts) back() int { return c.refunded + c.dropped }

// leasesSettled waits, up to 10 s, until every lease token granted since
// before was spent, sent back or dropped (the leases end within
// redis.lease_ttl and a quarter), and returns the counts since before.
func (s *stack) leasesSettled(before decisionCounts) decisionCounts {
	s.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c := s.leaseCounts().minus(before)
		if c.granted == c.admitted+c.back() {
			return c
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("lease tokens still held 10 s after the last request: %+v", c)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// me reads GET /me through gateway i; answers of the first gateway are
// checked against the OpenAPI document too.
func (s *stack) me(i int, key string) response {
	s.t.Helper()
	if i == 0 {
		return s.do(http.MethodGet, s.gwURLs[0]+"/api/vendor/v1/me", key, nil, nil)
	}
	return do(s.t, http.MethodGet, s.gwURLs[i]+"/api/vendor/v1/me", key, nil, nil)
}
