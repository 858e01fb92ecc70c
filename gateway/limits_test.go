package gateway

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"vendorgate/config"
	"vendorgate/shared/apierr"
	"vendorgate/shared/testredis"
	"vendorgate/shared/wire"
)

// limiterModes runs a test against the in-process limiter and against a
// real redis-server: the two must behave the same.
func limiterModes(t *testing.T, fn func(t *testing.T, withRedis func(*Options))) {
	t.Run("local", func(t *testing.T) { fn(t, func(*Options) {}) })
	t.Run("redis", func(t *testing.T) {
		rs := testredis.Start(t)
		fn(t, func(o *Options) { o.Config.Redis.URL = config.List{rs.URL()} })
	})
}

func retryAfter(t *testing.T, a answer) int {
	t.Helper()
	n, err := strconv.Atoi(a.header.Get("Retry-After"))
	if err != nil || n < 1 {
		t.Fatalf("Retry-After %q", a.header.Get("Retry-After"))
	}
	return n
}

func TestLimits(t *testing.T) {
	limiterModes(t, func(t *testing.T, withRedis func(*Options)) {
		b := newTestBackend(t)
		gw := startGateway(t, b, func(o *Options) {
			withRedis(o)
			o.Config.Limits.Overrides = map[string]config.LimitPair{"vendor-big": {Reads: config.Limit{Rate: 8, Period: time.Minute}}}
		})
		a1, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
		a2, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
		other, _ := b.addKey("vendor-b", wire.VendorApproved, time.Now().Add(time.Hour))
		big, _ := b.addKey("vendor-big", wire.VendorApproved, time.Now().Add(time.Hour))
		me := gw.url + "/api/vendor/v1/me"

		t.Run("reads shared by the vendor's keys", func(t *testing.T) {
			for i := 0; i < 5; i++ {
				k := a1
				if i%2 == 1 {
					k = a2
				}
				a := do(t, "GET", me, k)
				if a.status != 200 {
					t.Fatalf("read %d: %d %s", i, a.status, a.body)
				}
				if want := `"reads";r=` + strconv.Itoa(4-i) + ";"; !strings.HasPrefix(a.header.Get("RateLimit"), want) {
					t.Fatalf("read %d RateLimit %q, want prefix %q", i, a.header.Get("RateLimit"), want)
				}
			}
			a := do(t, "GET", me, a2)
			a.wantError(t, 429, apierr.RateLimited)
			if ra := retryAfter(t, a); ra > 12 {
				t.Fatalf("Retry-After %d past one emission interval", ra)
			}
			if a.header.Get("RateLimit-Policy") != `"reads";q=5;w=60` || !strings.HasPrefix(a.header.Get("RateLimit"), `"reads";r=0;t=`) {
				t.Fatalf("429 RateLimit headers %q %q", a.header.Get("RateLimit-Policy"), a.header.Get("RateLimit"))
			}
		})
		t.Run("orders have their own budget", func(t *testing.T) {
			for i := 0; i < 2; i++ {
				if a := do(t, "POST", gw.url+"/api/vendor/v1/orders", a1); a.status != 200 {
					t.Fatalf("order %d: %d %s", i, a.status, a.body)
				}
			}
			a := do(t, "POST", gw.url+"/api/vendor/v1/orders", a1)
			a.wantError(t, 429, apierr.RateLimited)
			retryAfter(t, a)
			if a.header.Get("RateLimit-Policy") != `"orders";q=2;w=60` {
				t.Fatalf("policy %q", a.header.Get("RateLimit-Policy"))
			}
		})
		t.Run("another vendor untouched", func(t *testing.T) {
			if a := do(t, "GET", me, other); a.status != 200 || !strings.HasPrefix(a.header.Get("RateLimit"), `"reads";r=4;`) {
				t.Fatalf("%d %q", a.status, a.header.Get("RateLimit"))
			}
		})
		t.Run("override", func(t *testing.T) {
			for i := 0; i < 8; i++ {
				if a := do(t, "GET", me, big); a.status != 200 {
					t.Fatalf("read %d: %d", i, a.status)
				}
			}
			do(t, "GET", me, big).wantError(t, 429, apierr.RateLimited)
		})
	})
}

func TestPerKeyLimitAndShadow(t *testing.T) {
	limiterModes(t, func(t *testing.T, withRedis func(*Options)) {
		b := newTestBackend(t)
		gw := startGateway(t, b, func(o *Options) {
			withRedis(o)
			o.Config.Limits.PerKey.Reads = config.Limit{Rate: 2, Period: time.Minute}
			o.Config.Limits.Overrides = map[string]config.LimitPair{"vendor-shadow": {Reads: config.Limit{Rate: 1, Period: time.Minute, Shadow: true}}}
		})
		k1, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
		k2, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
		sh, _ := b.addKey("vendor-shadow", wire.VendorApproved, time.Now().Add(time.Hour))
		me := gw.url + "/api/vendor/v1/me"
		for i := 0; i < 2; i++ {
			a := do(t, "GET", me, k1)
			if a.status != 200 {
				t.Fatalf("%d", a.status)
			}
			if a.header.Get("RateLimit-Policy") != `"reads";q=5;w=60, "key-reads";q=2;w=60` {
				t.Fatalf("policy %q", a.header.Get("RateLimit-Policy"))
			}
		}
		do(t, "GET", me, k1).wantError(t, 429, apierr.RateLimited)
		// The refused request charged nothing: the vendor has 3 reads left.
		a := do(t, "GET", me, k2)
		if a.status != 200 || !strings.HasPrefix(a.header.Get("RateLimit"), `"reads";r=2;`) {
			t.Fatalf("%d %q", a.status, a.header.Get("RateLimit"))
		}
		for i := 0; i < 2; i++ { // shadow vendor limit 1/min: counted, never refused (the per-key limit is 2)
			if a := do(t, "GET", me, sh); a.status != 200 {
				t.Fatalf("shadow limit refused: %d %s", a.status, a.body)
			}
		}
		m := scrape(t, gw)
		if !strings.Contains(m, `vendorgate_gateway_limiter_decisions_total{limit="reads",outcome="shadow_limited"} 1`) {
			t.Fatalf("shadow denials not exported:\n%s", grep(m, "limiter_decisions"))
		}
	})
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func scrape(t *testing.T, gw *testGateway) string {
	t.Helper()
	a := do(t, "GET", gw.admin+"/metrics", "")
	if a.status != 200 {
		t.Fatalf("metrics %d", a.status)
	}
	return string(a.body)
}
