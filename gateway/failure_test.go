package gateway

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"vendorgate/config"
	"vendorgate/shared/apierr"
	"vendorgate/shared/testredis"
	"vendorgate/shared/wire"
)

func TestTwoGatewaysShareOneRedis(t *testing.T) {
	rs := testredis.Start(t)
	b := newTestBackend(t)
	var gws []*testGateway
	for i := 0; i < 2; i++ {
		gws = append(gws, startGateway(t, b, func(o *Options) {
			o.Config.Redis.URL = config.List{rs.URL()}
			o.Config.Limits.Vendor.Reads = config.Limit{Rate: 20, Period: time.Minute}
		}))
	}
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	var ok, limited atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				a := do(t, "GET", gws[(w+i)%2].url+"/api/vendor/v1/me", key)
				switch a.status {
				case 200:
					ok.Add(1)
				case 429:
					limited.Add(1)
				default:
					t.Errorf("status %d %s", a.status, a.body)
				}
			}
		}(w)
	}
	wg.Wait()
	// 80 requests within well under a second: 20 of burst, perhaps one more
	// emitted (one per 3s).
	if ok.Load() < 20 || ok.Load() > 21 || ok.Load()+limited.Load() != 80 {
		t.Fatalf("admitted %d, limited %d; want 20 admitted together", ok.Load(), limited.Load())
	}
}

// TestRedisFailsClosed: Redis stopped → 503 within the timeout (the breaker
// then answers at once), restarted → 2xx again without a restart; Redis
// hung (SIGSTOP) → 503 quickly.
func TestRedisFailsClosed(t *testing.T) {
	rs := testredis.Start(t)
	b := newTestBackend(t)
	gw := startGateway(t, b, func(o *Options) {
		o.Config.Redis.URL = config.List{rs.URL()}
		o.Config.Limits.Vendor.Reads = config.Limit{Rate: 1000, Period: time.Minute}
	})
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	me := gw.url + "/api/vendor/v1/me"
	if a := do(t, "GET", me, key); a.status != 200 {
		t.Fatalf("%d", a.status)
	}
	fails := func(phase string) {
		t.Helper()
		for i := 0; i < 10; i++ {
			start := time.Now()
			a := do(t, "GET", me, key)
			a.wantError(t, 503, apierr.RateLimitUnavailable)
			retryAfter(t, a)
			if d := time.Since(start); d > time.Second {
				t.Fatalf("%s: request %d took %s", phase, i, d)
			}
		}
		if !strings.Contains(do(t, "GET", gw.admin+"/readyz", "").String(), "redis") {
			t.Fatalf("%s: /readyz does not name redis", phase)
		}
	}
	recovers := func(phase string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			a := do(t, "GET", me, key)
			if a.status == 200 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: still %d %s", phase, a.status, a.body)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	rs.Stop()
	fails("stopped")
	rs.Restart(t)
	recovers("restarted")

	rs.Pause()
	fails("paused")
	rs.Resume()
	recovers("resumed")
	m := scrape(t, gw)
	for _, want := range []string{`vendorgate_gateway_breaker_transitions_total{breaker="redis",from="closed",to="open"}`,
		`vendorgate_gateway_limiter_decisions_total{limit="reads",outcome="unavailable"}`, "vendorgate_gateway_redis_errors_total"} {
		if !strings.Contains(m, want) {
			t.Fatalf("metrics lack %s", want)
		}
	}
}

func (a answer) String() string { return string(a.body) }

// TestBackendBreaker: backend stopped → 503 request_failed, the breaker
// opens and answers in microseconds; it closes after the backend returns.
func TestBackendBreaker(t *testing.T) {
	b := newTestBackend(t)
	gw := startGateway(t, b, func(o *Options) { o.Config.Limits.Vendor.Reads = config.Limit{Rate: 1000, Period: time.Minute} })
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	me := gw.url + "/api/vendor/v1/me"
	if a := do(t, "GET", me, key); a.status != 200 { // the key is now cached
		t.Fatalf("%d", a.status)
	}
	b.stop()
	for i := 0; i < 5; i++ {
		a := do(t, "GET", me, key)
		a.wantError(t, 503, apierr.RequestFailed)
		retryAfter(t, a)
	}
	m := scrape(t, gw)
	if !strings.Contains(m, `vendorgate_gateway_breaker_state{breaker="backend:`+b.addr+`"} 2`) {
		t.Fatalf("backend breaker not open:\n%s", grep(m, "breaker_state"))
	}
	if code, body := getReadyz(t, gw, ""); code != 503 || !contains(body.Unhealthy, "backend") {
		t.Fatalf("/readyz does not name the backend: %d %+v", code, body)
	}
	// Open: answered without dialling.
	start := time.Now()
	do(t, "GET", me, key).wantError(t, 503, apierr.RequestFailed)
	if d := time.Since(start); d > 500*time.Millisecond { // generous: -race on a shared machine
		t.Fatalf("open breaker answered in %s", d)
	}
	b.restart()
	deadline := time.Now().Add(5 * time.Second)
	for do(t, "GET", me, key).status != 200 {
		if time.Now().After(deadline) {
			t.Fatal("breaker did not close after the backend returned")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestBackendTimeout(t *testing.T) {
	b := newTestBackend(t)
	gw := startGateway(t, b, func(o *Options) { o.Config.Proxy.Timeout = 200 * time.Millisecond })
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	b.delay.Store(int64(time.Second))
	do(t, "GET", gw.url+"/api/vendor/v1/orders/slow", key).wantError(t, 504, apierr.RequestFailed)
}

// TestOpenBackendSkipped: with two backends, one stopped, every request is
// served by the other once the stopped one's breaker is open.
func TestOpenBackendSkipped(t *testing.T) {
	b1, b2 := newTestBackend(t), newTestBackend(t)
	gw := startGateway(t, b1, func(o *Options) {
		o.Config.BackendURL = config.List{b1.URL(), b2.URL()}
		o.Config.Limits.Vendor.Reads = config.Limit{Rate: 1000, Period: time.Minute}
	})
	key, res := b1.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	b2.update(key, func(r *wire.KeyResolution) { *r = res })
	me := gw.url + "/api/vendor/v1/me"
	b1.stop()
	failed := 0
	for i := 0; i < 20; i++ {
		if a := do(t, "GET", me, key); a.status != 200 {
			failed++
		}
	}
	if failed > 3 { // the breaker opens after 3 consecutive failures
		t.Fatalf("%d of 20 failed with a healthy backend available", failed)
	}
	for i := 0; i < 10; i++ {
		if a := do(t, "GET", me, key); a.status != 200 {
			t.Fatalf("request %d after the breaker opened: %d %s", i, a.status, a.body)
		}
	}
	if a := do(t, "GET", gw.admin+"/readyz", ""); a.status != 200 {
		t.Fatalf("readyz with one healthy backend: %d %s", a.status, a.body)
	}
}

// TestUnavailableCountsRequestsNotTwins: with Redis down, a read whose
// limit has a shadow twin is one unavailable decision, not two.
func TestUnavailableCountsRequestsNotTwins(t *testing.T) {
	rs := testredis.Start(t)
	b := newTestBackend(t)
	gw := startGateway(t, b, func(o *Options) {
		o.Config.Redis.URL = config.List{rs.URL()}
		o.Config.Limits.Vendor.Reads = config.Limit{Rate: 1000, Period: time.Minute,
			ShadowTwin: &config.Limit{Rate: 500, Period: time.Minute}}
	})
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	rs.Stop()
	for range 5 {
		do(t, "GET", gw.url+"/api/vendor/v1/me", key).wantError(t, 503, apierr.RateLimitUnavailable)
	}
	const series = `vendorgate_gateway_limiter_decisions_total{limit="reads",outcome="unavailable"} `
	m := scrape(t, gw)
	i := strings.Index(m, series)
	if i < 0 {
		t.Fatalf("no %s in:\n%s", series, m)
	}
	if got := strings.Fields(m[i+len(series):])[0]; got != "5" {
		t.Fatalf("5 requests refused with Redis down counted as %s unavailable decisions", got)
	}
}

// TestShadowOnlyRouteWithoutRedis: a route whose limits are all shadow
// (the reads row run as a shadow, to watch a new limit before enforcing
// it) refuses nobody, so a Redis that cannot decide does not take the
// route from a vendor: reads answer 200 while Redis is stopped, and the
// shadow decisions are counted unavailable.
func TestShadowOnlyRouteWithoutRedis(t *testing.T) {
	rs := testredis.Start(t)
	b := newTestBackend(t)
	gw := startGateway(t, b, func(o *Options) {
		o.Config.Redis.URL = config.List{rs.URL()}
		o.Config.Limits.Vendor.Reads = config.Limit{Rate: 1000, Period: time.Minute, Shadow: true}
	})
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	me := gw.url + "/api/vendor/v1/me"
	if a := do(t, "GET", me, key); a.status != 200 {
		t.Fatalf("with Redis: %d %s", a.status, a.body)
	}
	rs.Stop()
	for i := 0; i < 5; i++ {
		if a := do(t, "GET", me, key); a.status != 200 {
			t.Fatalf("read %d with Redis stopped under a shadow-only limit: %d %s", i, a.status, a.body)
		}
	}
	if m := scrape(t, gw); !strings.Contains(m, `vendorgate_gateway_limiter_decisions_total{limit="reads",outcome="unavailable"}`) {
		t.Fatal("the shadow decisions Redis could not make are not counted unavailable")
	}
}
