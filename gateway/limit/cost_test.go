package limit

import (
	"math"
	"testing"
	"time"

	"vendorgate/gateway/policy"
	"vendorgate/shared/testredis"
)

// A request of cost n takes n tokens: a burst of 32 tokens at 5 a request
// admits 6 at once, the header counts tokens (what the bucket holds), and
// Remaining counts requests of the cost. In process and in Redis alike.
func TestCostLocalAndRedis(t *testing.T) {
	rs := testredis.Start(t)
	r := policy.Rate{Name: "downloads", Limit: 32, Period: time.Minute, Cost: 5}
	limiters := map[string]interface {
		Allow(policy.Checks) (Decision, error)
	}{
		"local":     NewLocal(LocalOptions{}),
		"alone":     newRedisOpts(t, rs, nil, false),
		"pipelined": newRedisOpts(t, rs, nil, true),
		"leased":    newLeased(t, rs, 16, 2*time.Second),
	}
	for name, l := range limiters {
		key := "vg:{v:" + name + "}:downloads"
		for i := 0; i < 6; i++ {
			d, err := l.Allow(one(key, r))
			if err != nil || !d.Allowed {
				t.Fatalf("%s: request %d refused: %+v %v", name, i+1, d, err)
			}
			if rem, _ := d.Left(0, r); rem != 32-5*(i+1) {
				t.Fatalf("%s: request %d: header remaining %d tokens, want %d", name, i+1, rem, 32-5*(i+1))
			}
			if name != "leased" && d.Results[0].Remaining != 5-i {
				t.Fatalf("%s: request %d: %d requests remaining, want %d", name, i+1, d.Results[0].Remaining, 5-i)
			}
		}
		d, err := l.Allow(one(key, r))
		if err != nil || d.Allowed {
			t.Fatalf("%s: 7th request (35 tokens of 32) admitted: %+v %v", name, d, err)
		}
		// 2 tokens left; a token comes back every 60/32 s, the request
		// needs 3 more: 3 × 1.875 s (less what has refilled since, in Redis'
		// own time).
		if want := 3 * time.Minute / 32; d.RetryAfter < want-200*time.Millisecond || d.RetryAfter > want {
			t.Fatalf("%s: retry after %s, want %s", name, d.RetryAfter, want)
		}
	}
}

// A lease is whole requests within lease_max tokens: at a cost of 5 and
// lease_max 16, a call takes at most 3 requests (15 tokens); Redis holds
// exactly the requests admitted and leased, never part of one.
func TestCostLeaseWholeRequests(t *testing.T) {
	rs := testredis.Start(t)
	l := newLeased(t, rs, 16, 10*time.Second)
	var grants []int
	l.leases.hooks.Granted = func(n int) { grants = append(grants, n) }
	r := policy.Rate{Name: "downloads", Limit: 3600, Burst: 1000, Period: time.Hour, Cost: 5} // 1 s a token
	const key = "vg:{v:1}:downloads"
	l.admit(t, key, r, 40)
	if len(grants) == 0 {
		t.Fatal("no lease granted")
	}
	leased := 0
	for _, n := range grants {
		if n > 2 { // beside the request's own: 3 requests, 15 tokens
			t.Fatalf("a lease of %d requests of 5 tokens, past lease_max 16", n)
		}
		leased += n
	}
	held := storedTAT(t, l.client, key) - nowSince2017(t, l.client)
	if got := math.Round(held); int(got)%5 != 0 || got < 200 || got > float64(5*(40+leased)) {
		t.Fatalf("bucket holds %.2f tokens: want whole requests of 5, at least the 40 admitted", held)
	}
	l.Close()
	held = storedTAT(t, l.client, key) - nowSince2017(t, l.client)
	if got := math.Round(held); got != 200 {
		t.Fatalf("bucket holds %.2f tokens after close, want the 40 requests admitted (200)", held)
	}
}
