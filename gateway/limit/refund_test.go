package limit

import (
	"hash/maphash"
	"math"
	"testing"
	"time"

	"vendorgate/gateway/policy"
	"vendorgate/shared/testredis"
)

// In process: a refunded request's tokens are admitted again, only a
// policy that refunds gives them back, and past the cap (a tenth of the
// burst a minute, at least a request) they stay charged.
func TestRefundLocal(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	l := NewLocal(LocalOptions{Now: func() time.Time { return now }})
	r := policy.Rate{Name: "downloads", Limit: 20, Period: time.Minute, Cost: 2, Refund: true} // 10 requests; cap 2 tokens
	plain := policy.Rate{Name: "reads", Limit: 10, Period: time.Minute}
	var cs policy.Checks
	cs.Add(policy.Check{Key: "v:downloads", Rate: r})
	cs.Add(policy.Check{Key: "v:reads", Rate: plain})
	var ds []Decision
	for i := 0; i < 10; i++ {
		d, _ := l.Allow(cs)
		if !d.Allowed {
			t.Fatalf("request %d refused", i+1)
		}
		ds = append(ds, d)
	}
	if n := l.Refund(cs, ds[9]); n != 1 {
		t.Fatalf("refunded %d buckets, want 1 (the reads policy does not refund)", n)
	}
	if n := l.Refund(cs, ds[8]); n != 0 {
		t.Fatalf("a second refund within the minute went back past the cap of 2 tokens")
	}
	if d, _ := l.Allow(one("v:downloads", r)); !d.Allowed {
		t.Fatal("the refunded request's tokens are not there")
	}
	if d, _ := l.Allow(one("v:downloads", r)); d.Allowed {
		t.Fatal("more came back than the one request refunded")
	}
	if d, _ := l.Allow(one("v:reads", plain)); d.Allowed {
		t.Fatal("the reads policy gave its token back")
	}
	now = now.Add(time.Minute) // the cap refills; the bucket too
	cs1 := one("v:downloads", r)
	d, _ := l.Allow(cs1)
	if l.Refund(cs1, d) != 1 {
		t.Fatal("no refund after the cap refilled")
	}
}

// In process: two requests charged, the first refunded, then the second
// (its charge lay above the first's): both come back. Before the refunds
// were reckoned below what earlier refunds took off, the second was
// skipped, its bucket lowered below its charge's TAT by the first.
func TestRefundLocalAfterEarlierRefund(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	l := NewLocal(LocalOptions{Now: func() time.Time { return now }})
	r := policy.Rate{Name: "downloads", Limit: 3600, Burst: 1000, Period: time.Hour, Refund: true} // 1 s a token
	cs := one("v:downloads", r)
	var ds []Decision
	for i := 0; i < 3; i++ {
		d, _ := l.Allow(cs)
		ds = append(ds, d)
	}
	if l.Refund(cs, ds[0]) != 1 || l.Refund(cs, ds[2]) != 1 {
		t.Fatal("a refund refused")
	}
	sh := &l.shards[maphash.String(l.seed, "v:downloads")%localShards]
	if held := time.Duration(sh.tat["v:downloads"] - now.UnixNano()); held != time.Second {
		t.Fatalf("bucket holds %s, want the second request's 1s", held)
	}
}

// In Redis, across two gateways, with leases, without, and without the
// pipeline: a refund gives back the request's own tokens and never the
// other gateway's charges; a token whose lease was sent back meanwhile
// stays charged.
func TestRefundRedisAcrossGateways(t *testing.T) {
	rs := testredis.Start(t)
	r := policy.Rate{Name: "downloads", Limit: 3600, Burst: 1000, Period: time.Hour, Refund: true} // 1 s a token
	for _, tc := range []struct {
		name     string
		leaseMax int
	}{{"leased", 16}, {"no lease", 1}} {
		t.Run(tc.name, func(t *testing.T) {
			a := newLeased(t, rs, tc.leaseMax, 10*time.Second)
			b := newLeased(t, rs, 1, time.Second)
			key := "vg:{v:" + tc.name + "}:downloads"
			cs := one(key, r)
			var ds []Decision
			for i := 0; i < 12; i++ {
				d, err := a.Allow(cs)
				if err != nil || !d.Allowed {
					t.Fatal(d, err)
				}
				ds = append(ds, d)
			}
			b.admit(t, key, r, 5) // the other gateway charges after a's
			for _, i := range []int{2, 7, 11} {
				if n := a.Refund(cs, ds[i]); n != 1 {
					t.Fatalf("refund of request %d: %d", i+1, n)
				}
			}
			a.Close() // the leases and the refunds go back
			held := storedTAT(t, a.client, key) - nowSince2017(t, a.client)
			if got := math.Round(held); got != 12-3+5 {
				t.Fatalf("bucket holds %.2f tokens, want 12 admitted - 3 refunded + 5 of the other gateway", held)
			}
		})
	}
	t.Run("lease sent back first", func(t *testing.T) {
		a := newLeased(t, rs, 16, 10*time.Second)
		key := "vg:{v:late}:downloads"
		cs := one(key, r)
		var last Decision
		for i := 0; i < 12; i++ {
			last, _ = a.Allow(cs)
		}
		if last.receipts[0].kind != receiptLease {
			t.Fatal("the 12th request did not come from a lease")
		}
		a.SetLeases(16, 10*time.Second) // a reload: every lease goes back
		a.leaseTick()
		if n := a.Refund(cs, last); n != 0 {
			t.Fatal("a token of a lease sent back went back again")
		}
		a.Close()
		held := storedTAT(t, a.client, key) - nowSince2017(t, a.client)
		if got := math.Round(held); got != 12 {
			t.Fatalf("bucket holds %.2f tokens, want the 12 admitted", held)
		}
	})
	t.Run("alone", func(t *testing.T) {
		a := newRedisOpts(t, rs, nil, false)
		key := "vg:{v:alone}:downloads"
		cs := one(key, r)
		var ds []Decision
		for i := 0; i < 4; i++ {
			d, _ := a.Allow(cs)
			ds = append(ds, d)
		}
		a.Refund(cs, ds[1])
		c := newLeased(t, rs, 1, time.Second).client
		var held float64
		if !within(2*time.Second, a.clock.(testClock).kick, func() bool { // the refund's call answered
			held = storedTAT(t, c, key) - nowSince2017(t, c)
			return math.Round(held) == 3
		}) {
			t.Fatalf("bucket holds %.2f tokens, want 4 admitted - 1 refunded", held)
		}
	})
}

// Refunds of one bucket sent in separate runs, the earlier grant's first,
// while the later charge was still open (two requests failed in a row, the
// lease loop sending the first refund before the second request failed):
// each comes back whole, and another gateway's charge, made before the
// refunds or between them, stays charged. Before the refunds were reckoned
// below what the gateway's own earlier refunds took off, the later one was
// skipped ("later charge open": 2 tokens held, want 1).
func TestRefundAfterOwnEarlierRefund(t *testing.T) {
	rs := testredis.Start(t)
	r := policy.Rate{Name: "downloads", Limit: 3600, Burst: 1000, Period: time.Hour, Refund: true} // 1 s a token
	for _, tc := range []struct {
		name          string
		before, among int // the other gateway's charges: after a's, before the refunds; between them
	}{{"later charge open", 0, 0}, {"another gateway's charge before", 2, 0}, {"another gateway's charge between", 0, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			a := newLeased(t, rs, 1, 10*time.Second) // every request asks Redis: a grant of its own
			b := newLeased(t, rs, 1, time.Second)
			key := "vg:{v:" + tc.name + "}:downloads"
			cs := one(key, r)
			var ds []Decision
			for i := 0; i < 3; i++ {
				d, err := a.Allow(cs)
				if err != nil || !d.Allowed || d.receipts[0].kind != receiptGrant {
					t.Fatal(d, err)
				}
				ds = append(ds, d)
			}
			send := func() { // the lease loop's next run of refunds
				a.loopMu.Lock()
				defer a.loopMu.Unlock()
				a.sendRefunds(a.leases.sweep(a.clock.Nanotime(), false))
			}
			b.admit(t, key, r, tc.before)
			if a.Refund(cs, ds[0]) != 1 {
				t.Fatal("the first request's refund refused")
			}
			send()
			b.admit(t, key, r, tc.among)
			if a.Refund(cs, ds[2]) != 1 {
				t.Fatal("the third request's refund refused")
			}
			send()
			held := storedTAT(t, a.client, key) - nowSince2017(t, a.client)
			if want := 1 + tc.before + tc.among; math.Round(held) != float64(want) {
				t.Fatalf("bucket holds %.2f tokens, want %d: a's second request and the other gateway's", held, want)
			}
		})
	}
}

// Past the cap a refund takes nothing back: a retry storm against a
// failing backend lifts the limit by a tenth of the burst a minute at each
// gateway at most.
func TestRefundCap(t *testing.T) {
	rs := testredis.Start(t)
	a := newLeased(t, rs, 1, time.Second)
	r := policy.Rate{Name: "downloads", Limit: 3600, Burst: 50, Period: time.Hour, Refund: true} // cap 5 a minute
	key := "vg:{v:cap}:downloads"
	cs := one(key, r)
	n := 0
	for i := 0; i < 20; i++ {
		d, err := a.Allow(cs)
		if err != nil || !d.Allowed {
			t.Fatal(d, err)
		}
		n += a.Refund(cs, d)
	}
	if n != 5 {
		t.Fatalf("%d of 20 failed requests refunded, want the cap of 5", n)
	}
	a.Close()
	held := storedTAT(t, a.client, key) - nowSince2017(t, a.client)
	if got := math.Round(held); got != 15 {
		t.Fatalf("bucket holds %.2f tokens, want 20 - 5", held)
	}
}
