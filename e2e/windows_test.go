package e2e

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestQuotaAndSlidingWindowAcrossReplicas: the real binaries, two gateways
// on one Redis, the reads row a sliding window and a daily quota beside
// it: the quota admits exactly its 5 reads a day across both gateways,
// refuses past it with Retry-After until the day turns and both entries
// in the RateLimit headers, and `vendorctl usage show` tells how much of
// the quota the vendor used.
func TestQuotaAndSlidingWindowAcrossReplicas(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{redis: true, gateways: 2, gatewayYAML: `limits:
  vendor:
    reads: {kind: window, rate: 120, period: 1m}
    orders: {rate: 10, period: 1m}
  policies:
    - {name: reads-day, scope: vendor, class: reads, kind: quota, rate: 5, window: day}
`})
	vendor, key := s.newVendor("sandbox", "mvr")
	codes := map[int]int{}
	var refused response
	for i := 0; i < 8; i++ {
		r := s.me(i%2, key)
		codes[r.status]++
		if r.status == 429 {
			refused = r
		}
		if p := r.header.Get("RateLimit-Policy"); p != `"reads";q=120;w=60, "reads-day";q=5;w=86400` {
			t.Fatalf("read %d: RateLimit-Policy %q", i, p)
		}
	}
	if codes[200] != 5 || codes[429] != 3 {
		t.Fatalf("reads across both gateways: %v, want 5 x 200 and 3 x 429", codes)
	}
	now := time.Now().UTC()
	midnight := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC)
	ra, _ := strconv.Atoi(refused.header.Get("Retry-After"))
	if want := int(midnight.Sub(now).Seconds()); ra < want-5 || ra > want+5 {
		t.Fatalf("Retry-After %d, want about %d (the time until the day turns)", ra, want)
	}
	if rl := refused.header.Get("RateLimit"); !strings.HasPrefix(rl, `"reads";r=115;t=`) || !strings.Contains(rl, `"reads-day";r=0;t=`) {
		t.Fatalf("refused read's RateLimit %q", rl)
	}
	var show struct {
		Policies []struct {
			Limit     string `json:"limit"`
			QuotaUsed *struct {
				Used  int `json:"used"`
				Quota int `json:"quota"`
			} `json:"quota_used"`
		} `json:"policies"`
	}
	decode(t, s.mustVendorctl("-o", "json", "usage", "show", vendor), &show)
	found := false
	for _, p := range show.Policies {
		if p.Limit == "reads-day" && p.QuotaUsed != nil {
			found = true
			if p.QuotaUsed.Used != 5 || p.QuotaUsed.Quota != 5 {
				t.Fatalf("usage show: reads-day used %+v, want 5 of 5", *p.QuotaUsed)
			}
		}
	}
	if !found {
		t.Fatalf("usage show lists no quota: %+v", show)
	}
	if out := s.mustVendorctl("usage", "show", vendor); !strings.Contains(out, "used 5 of 5 this window") {
		t.Fatalf("usage show's table lacks the quota's use:\n%s", out)
	}
}
