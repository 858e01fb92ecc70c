package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"vendorgate/config"
	"vendorgate/gateway/usage"
	"vendorgate/shared/apierr"
	"vendorgate/shared/testredis"
	"vendorgate/shared/wire"
)

// secondsToMidnight is what t and Retry-After of a daily quota say at the
// time the gateway answered a (its Date header: the gateway's clock, to
// the second), not at the test's.
func secondsToMidnight(t *testing.T, a answer) int {
	t.Helper()
	at := answeredAt(t, a)
	next := time.Date(at.Year(), at.Month(), at.Day()+1, 0, 0, 0, 0, time.UTC)
	return int(next.Sub(at) / time.Second)
}

// answeredAt is a's Date header.
func answeredAt(t *testing.T, a answer) time.Time {
	t.Helper()
	at, err := http.ParseTime(a.header.Get("Date"))
	if err != nil {
		t.Fatalf("Date %q: %v", a.header.Get("Date"), err)
	}
	return at.UTC()
}

func near(got, want int) bool { return got >= want-3 && got <= want+3 }

// TestQuotaPolicy: a daily quota beside the per-minute orders limit, as an
// operator adds it (one row): its own RateLimit-Policy and RateLimit
// entries, 429 rate_limited with Retry-After until the day turns past it,
// and a request refused by either limit charges neither (all-or-nothing);
// the usage view shows the quota's counter; the docs page names the
// algorithm. It reads no clock of its own: the day is the gateway's, from
// its answers' Date; a run the UTC day turned in the middle of (the quota
// restarting under it) is run again, once, on a new gateway.
func TestQuotaPolicy(t *testing.T) {
	limiterModes(t, func(t *testing.T, withRedis func(*Options)) {
		for try := 0; ; try++ {
			q := quotaScenario(t, withRedis)
			if first, last := answeredAt(t, q.orders[0]), answeredAt(t, q.last); first.YearDay() != last.YearDay() {
				if try == 0 {
					t.Logf("the UTC day turned during the run (%v to %v): run again", first, last)
					continue
				}
				t.Fatalf("the UTC day turned during two runs (%v to %v)", first, last)
			}
			q.check(t)
			return
		}
	})
}

// quotaRun is what TestQuotaPolicy's scenario saw, checked once the test
// knows the day did not turn under it.
type quotaRun struct {
	orders       []answer // vendor-a's 3 admitted orders, then its 2 refused
	metrics      string
	read         answer
	vendorB      []answer
	usedA, usedB int
	docs         answer
	last         answer // the run's last answer, for its day
}

func quotaScenario(t *testing.T, withRedis func(*Options)) *quotaRun {
	const adminToken = "usage-admin-token-0123"
	b := newTestBackend(t)
	gw := startGateway(t, b, func(o *Options) {
		withRedis(o)
		o.Config.AdminToken = adminToken
		o.Config.Limits.Vendor.Orders = config.Limit{Rate: 4, Period: time.Minute, Burst: 4}
		o.Config.Limits.Policies = []config.Policy{{Name: "orders-day", Scope: config.ScopeVendor, Class: config.ClassOrders,
			Limit: config.Limit{Kind: config.KindQuota, Rate: 3, Window: config.WindowDay}}}
	})
	key, res := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	orders := gw.url + "/api/vendor/v1/orders"
	q := &quotaRun{}
	for range 5 {
		q.orders = append(q.orders, do(t, "POST", orders, key))
	}
	q.metrics = scrape(t, gw)
	// Reads are not orders.
	q.read = do(t, "GET", gw.url+"/api/vendor/v1/me", key)
	// Another vendor counts on a counter of its own.
	key2, res2 := b.addKey("vendor-b", wire.VendorApproved, time.Now().Add(time.Hour))
	for range 3 {
		q.vendorB = append(q.vendorB, do(t, "POST", orders, key2))
	}
	q.usedB = quotaUsed(t, gw, adminToken, res2.VendorID)
	q.docs = do(t, "GET", gw.url+"/docs", "")
	q.usedA = quotaUsed(t, gw, adminToken, res.VendorID)
	q.last = do(t, "GET", gw.url+"/api/vendor/v1/me", key)
	return q
}

func (q *quotaRun) check(t *testing.T) {
	for i, a := range q.orders[:3] {
		if a.status != 200 {
			t.Fatalf("order %d: %d %s", i, a.status, a.body)
		}
		if p := a.header.Get("RateLimit-Policy"); p != `"orders";q=4;w=60, "orders-day";q=3;w=86400` {
			t.Fatalf("order %d RateLimit-Policy %q", i, p)
		}
		rl := a.header.Get("RateLimit")
		var r, tt int
		if _, err := fmt.Sscanf(rl[strings.Index(rl, `"orders-day"`):], `"orders-day";r=%d;t=%d`, &r, &tt); err != nil || r != 2-i || !near(tt, secondsToMidnight(t, a)) {
			t.Fatalf("order %d RateLimit %q (r %d t %d, want r %d t %d)", i, rl, r, tt, 2-i, secondsToMidnight(t, a))
		}
		if !strings.HasPrefix(rl, `"orders";r=`+strconv.Itoa(3-i)+";") {
			t.Fatalf("order %d RateLimit %q", i, rl)
		}
	}
	a := q.orders[3]
	a.wantError(t, 429, apierr.RateLimited)
	if ra := retryAfter(t, a); !near(ra, secondsToMidnight(t, a)) {
		t.Fatalf("Retry-After %d, want the time until the day turns, %d", ra, secondsToMidnight(t, a))
	}
	// The quota refused first: the orders bucket was not consulted, so
	// not charged (its decisions count the 3 admitted only), and the
	// RateLimit field tells the quota's state alone.
	if p, rl := a.header.Get("RateLimit-Policy"), a.header.Get("RateLimit"); p != `"orders";q=4;w=60, "orders-day";q=3;w=86400` || !strings.HasPrefix(rl, `"orders-day";r=0;`) {
		t.Fatalf("refused order RateLimit-Policy %q RateLimit %q", p, rl)
	}
	if a := q.orders[4]; a.status != 429 {
		t.Fatalf("again: %d", a.status)
	}
	for _, want := range []string{
		`vendorgate_gateway_limiter_decisions_total{limit="orders",outcome="allowed"} 3`,
		`vendorgate_gateway_limiter_decisions_total{limit="orders-day",outcome="limited"} 2`,
	} {
		if !strings.Contains(q.metrics, want+"\n") {
			t.Fatalf("metrics lack %s:\n%s", want, grep(q.metrics, "limiter_decisions"))
		}
	}
	if a := q.read; a.status != 200 || a.header.Get("RateLimit-Policy") != `"reads";q=5;w=60` {
		t.Fatalf("read: %d %q", a.status, a.header.Get("RateLimit-Policy"))
	}
	for i, a := range q.vendorB {
		if a.status != 200 {
			t.Fatalf("vendor-b order %d: %d", i, a.status)
		}
	}
	if q.usedB != 3 {
		t.Fatalf("vendor-b used %d", q.usedB)
	}
	for _, want := range []string{"calendar quota", "3 per UTC day", "token bucket (GCRA)"} {
		if !strings.Contains(string(q.docs.body), want) {
			t.Fatalf("docs page lacks %q", want)
		}
	}
	if q.usedA != 3 {
		t.Fatalf("usage view: vendor-a used %d of its quota, want 3", q.usedA)
	}
}

// TestQuotaRefundedWhenGCRARefuses: a request the per-minute limit
// refuses after the quota charged it gives the charge back: the quota's
// counter is what was admitted, whatever was refused.
func TestQuotaRefundedWhenGCRARefuses(t *testing.T) {
	const adminToken = "usage-admin-token-0123"
	limiterModes(t, func(t *testing.T, withRedis func(*Options)) {
		b := newTestBackend(t)
		gw := startGateway(t, b, func(o *Options) {
			withRedis(o)
			o.Config.AdminToken = adminToken
			o.Config.Limits.Vendor.Orders = config.Limit{Rate: 2, Period: time.Hour}
			o.Config.Limits.Policies = []config.Policy{{Name: "orders-month", Scope: config.ScopeVendor, Class: config.ClassOrders,
				Limit: config.Limit{Kind: config.KindQuota, Rate: 100, Window: config.WindowMonth}}}
		})
		key, res := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
		orders := gw.url + "/api/vendor/v1/orders"
		statuses := map[int]int{}
		for i := 0; i < 6; i++ {
			a := do(t, "POST", orders, key)
			statuses[a.status]++
			if a.status == 429 && !strings.Contains(a.header.Get("RateLimit"), `"orders-month";r=98;`) {
				t.Fatalf("refused by orders: RateLimit %q, want orders-month's 98 left (its charge given back)", a.header.Get("RateLimit"))
			}
		}
		if statuses[200] != 2 || statuses[429] != 4 {
			t.Fatalf("statuses %v", statuses)
		}
		if u := quotaUsed(t, gw, adminToken, res.VendorID); u != 2 {
			t.Fatalf("the month's counter is %d after 2 admitted and 4 refused, want 2", u)
		}
	})
}

// quotaUsed reads vendor's first quota's counter from the usage view.
func quotaUsed(t *testing.T, gw *testGateway, token, vendor string) int {
	t.Helper()
	gw.g.usage.Flush()
	req, _ := http.NewRequest("GET", gw.admin+"/usage/"+vendor+"?window=1h", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v usage.VendorUsage
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatalf("usage view %d: %v", resp.StatusCode, err)
	}
	for _, p := range v.Policies {
		if p.QuotaUsed != nil {
			return p.QuotaUsed.Used
		}
	}
	t.Fatalf("usage view of %s shows no quota: %+v", vendor, v)
	return 0
}

// TestWindowsAcrossGateways: two gateways on one Redis with the shipped
// Redis settings admit, between them, exactly a quota's and a sliding
// window's limit however the requests are spread, and refuse 503
// rate_limit_unavailable when Redis is gone.
func TestWindowsAcrossGateways(t *testing.T) {
	rs := testredis.Start(t)
	b := newTestBackend(t)
	shipped := func(o *Options) {
		onShippedRedis(o, rs)
		o.Config.Limits.Vendor.Reads = config.Limit{Rate: 100000, Period: time.Minute, Kind: config.KindWindow}
		o.Config.Limits.Vendor.Orders = config.Limit{Rate: 100000, Period: time.Minute}
		o.Config.Limits.Policies = []config.Policy{
			{Name: "orders-day", Scope: config.ScopeVendor, Class: config.ClassOrders, Limit: config.Limit{Kind: config.KindQuota, Rate: 25, Days: 1}},
			{Name: "reads-strict", Scope: config.ScopeVendor, Class: config.ClassReads, Limit: config.Limit{Kind: config.KindWindow, Rate: 15, Period: time.Hour}},
		}
	}
	g1, g2 := startGateway(t, b, shipped), startGateway(t, b, shipped)
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	for _, tc := range []struct {
		method, path string
		want         int
	}{{"POST", "/api/vendor/v1/orders", 25}, {"GET", "/api/vendor/v1/me", 15}} {
		ok, refused, other := spreadOver(t, []*testGateway{g1, g2}, 10, tc.method, tc.path, key)
		if ok != int64(tc.want) || refused != 80-int64(tc.want) || other != 0 {
			t.Fatalf("%s %s: %d admitted, %d refused, %d other; want exactly %d admitted across both gateways",
				tc.method, tc.path, ok, refused, other, tc.want)
		}
	}
	rs.Stop()
	do(t, "POST", g1.url+"/api/vendor/v1/orders", key).wantError(t, 503, apierr.RateLimitUnavailable)
	do(t, "GET", g2.url+"/api/vendor/v1/me", key).wantError(t, 503, apierr.RateLimitUnavailable)
}

// onShippedRedis points o at rs with the shipped Redis timeout and pool
// (the tests' configuration shortens them).
func onShippedRedis(o *Options, rs *testredis.Server) {
	o.Config.Redis.URL = config.List{rs.URL()}
	d := config.DefaultGateway().Redis
	o.Config.Redis.Timeout, o.Config.Redis.PoolSize = d.Timeout, d.PoolSize
}

// spreadOver sends each requests from 8 clients at once, client w to
// gateway w of gws in turn, and counts the answers admitted (200),
// refused (429) and other.
func spreadOver(t *testing.T, gws []*testGateway, each int, method, path, key string) (ok, refused, other int64) {
	var okN, refusedN, otherN atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gw := gws[w%len(gws)]
			for i := 0; i < each; i++ {
				switch a := do(t, method, gw.url+path, key); a.status {
				case 200:
					okN.Add(1)
				case 429:
					refusedN.Add(1)
				default:
					otherN.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return okN.Load(), refusedN.Load(), otherN.Load()
}

// TestReadsAsSlidingWindow: the specification's reads row given a sliding
// window by the operator admits its rate in any period and no more, with
// its RateLimit headers and its algorithm on /docs.
func TestReadsAsSlidingWindow(t *testing.T) {
	limiterModes(t, func(t *testing.T, withRedis func(*Options)) {
		b := newTestBackend(t)
		gw := startGateway(t, b, func(o *Options) {
			withRedis(o)
			o.Config.Limits.Vendor.Reads = config.Limit{Kind: config.KindWindow, Rate: 3, Period: time.Minute}
		})
		key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
		me := gw.url + "/api/vendor/v1/me"
		for i := 0; i < 3; i++ {
			a := do(t, "GET", me, key)
			if a.status != 200 || a.header.Get("RateLimit-Policy") != `"reads";q=3;w=60` ||
				a.header.Get("RateLimit") != `"reads";r=`+strconv.Itoa(2-i)+";t=60" {
				t.Fatalf("read %d: %d %q %q", i, a.status, a.header.Get("RateLimit-Policy"), a.header.Get("RateLimit"))
			}
		}
		a := do(t, "GET", me, key)
		a.wantError(t, 429, apierr.RateLimited)
		if ra := retryAfter(t, a); ra < 58 || ra > 60 {
			t.Fatalf("Retry-After %d, want the first read's leaving the window, about 60", ra)
		}
		if rl := a.header.Get("RateLimit"); !strings.HasPrefix(rl, `"reads";r=0;t=`) {
			t.Fatalf("refused read RateLimit %q", rl)
		}
		page := string(do(t, "GET", gw.url+"/docs", "").body)
		if !strings.Contains(page, "sliding window") || !strings.Contains(page, "3 in any minute") {
			t.Fatal("docs page does not say the reads row is a sliding window of 3 in any minute")
		}
	})
}

// TestShadowWindowsWithoutRedis: a shadow quota never makes a route
// depend on Redis (its check, undecided, is counted unavailable and the
// request goes on, as a shadow GCRA limit's), where an enforced one
// refuses 503 rate_limit_unavailable.
func TestShadowWindowsWithoutRedis(t *testing.T) {
	rs := testredis.Start(t)
	b := newTestBackend(t)
	gw := startGateway(t, b, func(o *Options) {
		o.Config.Redis.URL = config.List{rs.URL()}
		o.Config.Limits.Vendor.Reads = config.Limit{Rate: 100, Period: time.Minute, Shadow: true}
		o.Config.Limits.Policies = []config.Policy{
			{Name: "reads-day", Scope: config.ScopeVendor, Class: config.ClassReads, Limit: config.Limit{Kind: config.KindQuota, Rate: 1, Window: config.WindowDay, Shadow: true}},
			{Name: "orders-day", Scope: config.ScopeVendor, Class: config.ClassOrders, Limit: config.Limit{Kind: config.KindQuota, Rate: 100, Window: config.WindowDay}},
		}
	})
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	me := gw.url + "/api/vendor/v1/me"
	for i := 0; i < 2; i++ { // the second is over the shadow quota: counted, not refused
		if a := do(t, "GET", me, key); a.status != 200 || a.header.Get("RateLimit-Policy") != "" {
			t.Fatalf("read %d: %d %q (shadow limits are not told)", i, a.status, a.header.Get("RateLimit-Policy"))
		}
	}
	rs.Stop()
	if a := do(t, "GET", me, key); a.status != 200 {
		t.Fatalf("read with Redis gone, only shadow limits: %d %s", a.status, a.body)
	}
	do(t, "POST", gw.url+"/api/vendor/v1/orders", key).wantError(t, 503, apierr.RateLimitUnavailable)
	m := scrape(t, gw)
	for _, want := range []string{
		`vendorgate_gateway_limiter_decisions_total{limit="reads-day",outcome="shadow_limited"} 1`,
		`vendorgate_gateway_limiter_decisions_total{limit="reads-day",outcome="unavailable"} 1`,
		`vendorgate_gateway_limiter_decisions_total{limit="orders-day",outcome="unavailable"} 1`,
	} {
		if !strings.Contains(m, want+"\n") {
			t.Fatalf("metrics lack %s:\n%s", want, grep(m, "limiter_decisions"))
		}
	}
}

// TestQuotaReloaded: a quota added by a reload counts from the next
// request; raising it by another reload keeps what was used (the counter
// is the row's name and the window's start, not its limit).
func TestQuotaReloaded(t *testing.T) {
	limiterModes(t, func(t *testing.T, withRedis func(*Options)) {
		b := newTestBackend(t)
		gw := startGateway(t, b, func(o *Options) {
			withRedis(o)
			o.Config.Limits.Vendor.Orders = config.Limit{Rate: 100, Period: time.Minute}
		})
		key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
		orders := gw.url + "/api/vendor/v1/orders"
		if a := do(t, "POST", orders, key); a.status != 200 {
			t.Fatalf("before: %d", a.status)
		}
		reload := func(rate int) {
			c := *gw.cfg
			c.Limits.Vendor.Orders = config.Limit{Rate: 100, Period: time.Minute}
			c.Limits.Policies = []config.Policy{{Name: "orders-day", Scope: config.ScopeVendor, Class: config.ClassOrders,
				Limit: config.Limit{Kind: config.KindQuota, Rate: rate, Window: config.WindowDay}}}
			c.Version = "v" + strconv.Itoa(rate)
			if err := gw.g.Reload(&c); err != nil {
				t.Fatal(err)
			}
		}
		reload(2)
		for i, want := range []int{200, 200, 429} {
			if a := do(t, "POST", orders, key); a.status != want {
				t.Fatalf("order %d under a quota of 2: %d", i, a.status)
			}
		}
		reload(3)
		for i, want := range []int{200, 429} {
			if a := do(t, "POST", orders, key); a.status != want {
				t.Fatalf("order %d under a quota of 3, 2 used: %d", i, a.status)
			}
		}
	})
}

// TestLeasedQuotaAcrossGateways: a leased quota of 60 orders a day on
// gateways sharing one Redis, with the shipped Redis settings (slices of
// at most redis.lease_max). Two gateways take 40 orders spread between them:
// all admitted (with room left, no refusal). When both have stopped (each
// gives back what its leases held), the quota's counter in Redis is the 40
// they admitted. Two more gateways then share 40 orders for the 20 left:
// never more than 20 admitted between them, and once they have stopped the
// counter is what all four admitted: nothing a lease took is lost.
func TestLeasedQuotaAcrossGateways(t *testing.T) {
	rs := testredis.Start(t)
	b := newTestBackend(t)
	shipped := func(o *Options) {
		onShippedRedis(o, rs)
		o.Config.Limits.Vendor.Orders = config.Limit{Rate: 100000, Period: time.Minute}
		o.Config.Limits.Policies = []config.Policy{{Name: "orders-day", Scope: config.ScopeVendor, Class: config.ClassOrders,
			Limit: config.Limit{Kind: config.KindQuota, Rate: 60, Days: 1, Lease: true}}}
	}
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	rc := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rc.Close()
	// spread sends 40 orders from 8 clients over two new gateways, then
	// stops them; it returns how many were admitted.
	spread := func() int64 {
		gws := []*testGateway{startGateway(t, b, shipped), startGateway(t, b, shipped)}
		ok, _, other := spreadOver(t, gws, 5, "POST", "/api/vendor/v1/orders", key)
		if other != 0 {
			t.Fatalf("%d answers neither 200 nor 429", other)
		}
		for _, gw := range gws {
			if err := gw.g.Shutdown(0, 5*time.Second); err != nil {
				t.Fatal(err)
			}
		}
		return ok
	}
	counter := func() int64 {
		t.Helper()
		keys, err := rc.Keys(context.Background(), "win:*orders-day:q*").Result()
		if err != nil || len(keys) != 1 {
			t.Fatalf("the quota's counters in Redis: %q, %v; want one", keys, err)
		}
		n, err := rc.Get(context.Background(), keys[0]).Int64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if first := spread(); first != 40 {
		t.Fatalf("%d of 40 orders admitted under a quota of 60, want all", first)
	}
	if n := counter(); n != 40 {
		t.Fatalf("the counter holds %d after the gateways stopped, want the 40 they admitted", n)
	}
	second := spread()
	if second > 20 {
		t.Fatalf("%d admitted for the 20 left", second)
	}
	if n := counter(); n != 40+second {
		t.Fatalf("the counter holds %d after the gateways stopped, want the %d all four admitted", n, 40+second)
	}
}

// TestLeasedQuotaHeadersAndUsage: on one gateway, a leased quota's
// RateLimit header counts down by one a request as an exact quota's does
// (what the gateway's slice holds unspent is not counted used), and so
// does the usage view's quota_used, though Redis' counter holds the slice.
func TestLeasedQuotaHeadersAndUsage(t *testing.T) {
	const adminToken = "usage-admin-token-0123"
	rs := testredis.Start(t)
	b := newTestBackend(t)
	gw := startGateway(t, b, func(o *Options) {
		o.Config.Redis.URL = config.List{rs.URL()}
		o.Config.AdminToken = adminToken
		o.Config.Limits.Vendor.Reads = config.Limit{Rate: 100000, Period: time.Minute}
		o.Config.Limits.Policies = []config.Policy{{Name: "reads-day", Scope: config.ScopeVendor, Class: config.ClassReads,
			Limit: config.Limit{Kind: config.KindQuota, Rate: 1000, Window: config.WindowDay, Lease: true}}}
	})
	key, res := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	const n = 40
	for i := 0; i < n; i++ {
		a := do(t, "GET", gw.url+"/api/vendor/v1/me", key)
		rl := a.header.Get("RateLimit")
		var r, tt int
		if a.status != 200 || !strings.Contains(rl, `"reads-day"`) {
			t.Fatalf("read %d: %d, RateLimit %q", i, a.status, rl)
		}
		if _, err := fmt.Sscanf(rl[strings.Index(rl, `"reads-day"`):], `"reads-day";r=%d;t=%d`, &r, &tt); err != nil || r != 999-i {
			t.Fatalf("read %d: RateLimit %q, want reads-day's r=%d", i, rl, 999-i)
		}
	}
	if used := quotaUsed(t, gw, adminToken, res.VendorID); used != n {
		t.Fatalf("quota_used %d, want the %d reads", used, n)
	}
	rc := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rc.Close()
	keys, err := rc.Keys(context.Background(), "win:*reads-day:q*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("the quota's counters: %q, %v", keys, err)
	}
	if c, _ := rc.Get(context.Background(), keys[0]).Int(); c <= n {
		t.Fatalf("the counter holds %d: no slice taken beyond the %d reads (the test shows nothing)", c, n)
	}
}
