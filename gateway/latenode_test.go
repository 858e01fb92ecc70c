package gateway

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"

	"vendorgate/config"
	"vendorgate/gateway/limit/redisconn"
	"vendorgate/shared/apierr"
	"vendorgate/shared/testredis"
	"vendorgate/shared/wire"
)

// TestWindowQuotaAndSlotCallsKeepTheLimiterRule: a gateway whose node runs
// late (the limiter transport's timers, its scheduling probe's among them,
// wake 10ms late, past the 2ms tick slack, as on cores taken by others) with the shipped Redis timeouts (50ms, a 500ms
// wire deadline). Redis pauses 200ms, three times, while a sliding window
// read, an order under a daily quota and a report download under a
// concurrency policy are asked: Redis answers within the wire deadline,
// so by the limiter's rule (docs/limiter-design.md, "When is Redis down") no call
// may fail, and every request is answered 200, as the transport's own
// calls are (gateway/limit/redisconn:
// TestLateNodeLeavesTheVerdictToTheWire). Redis paused for good is then
// called down: 503 rate_limit_unavailable.
func TestWindowQuotaAndSlotCallsKeepTheLimiterRule(t *testing.T) {
	rs := testredis.Start(t)
	b := newTestBackend(t)
	// A small report: what is asked of the limiters, not of the stream
	// (the test backend's 3 MiB one is slow to stream under -race).
	b.setReport(func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/pdf")
		ctx.SetBodyString("%PDF-1.4 report")
	})
	clk := &lateClock{SystemClock: redisconn.SystemClock{Epoch: time.Now()}}
	gw := startGateway(t, b, func(o *Options) {
		o.LimiterClock = clk
		o.Config.Redis.URL = config.List{rs.URL()}
		d := config.DefaultGateway().Redis
		o.Config.Redis.Timeout, o.Config.Redis.WireTimeout, o.Config.Redis.BusyTimeout = d.Timeout, d.WireTimeout, d.BusyTimeout
		o.Config.Redis.TickSlack = d.TickSlack
		o.Config.Limits.Vendor.Reads = config.Limit{Kind: config.KindWindow, Rate: 100000, Period: time.Minute}
		o.Config.Limits.Vendor.Orders = config.Limit{Rate: 100000, Period: time.Minute}
		o.Config.Limits.Policies = []config.Policy{
			{Name: "orders-day", Scope: config.ScopeVendor, Class: config.ClassOrders, Limit: config.Limit{Kind: config.KindQuota, Rate: 100000, Days: 1}},
			downloadsAtOnce(64),
		}
	})
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	asks := []struct{ what, method, path string }{
		{"sliding window read", "GET", "/api/vendor/v1/me"},
		{"order under a quota", "POST", "/api/vendor/v1/orders"},
		{"report under a concurrency policy", "GET", "/api/vendor/v1/orders/o1/reports/mvr"},
	}
	for _, a := range asks { // connections made, scripts loaded
		if got := do(t, a.method, gw.url+a.path, key); got.status != 200 {
			t.Fatalf("%s with Redis answering: %d %s", a.what, got.status, got.body)
		}
	}
	tr := gw.g.stores.Redis.Transport()
	clk.late.Store(int64(10 * time.Millisecond))
	for deadline := time.Now().Add(5 * time.Second); tr.OnTime(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("on time with the probe 10ms late (lateness %s)", tr.Lateness())
		}
	}
	var mu sync.Mutex
	failed := map[string]int{}
	asked := 0
	for round := 0; round < 3; round++ {
		rs.Pause()
		resumed := make(chan struct{})
		go func() {
			defer close(resumed)
			time.Sleep(200 * time.Millisecond)
			rs.Resume()
		}()
		var wg sync.WaitGroup
		for i := 0; i < 9; i++ {
			a := asks[i%len(asks)]
			wg.Add(1)
			go func() {
				defer wg.Done()
				got := do(t, a.method, gw.url+a.path, key)
				mu.Lock()
				defer mu.Unlock()
				asked++
				if got.status != 200 {
					failed[fmt.Sprintf("%s: %d %s", a.what, got.status, got.env.Code)]++
				}
			}()
		}
		wg.Wait()
		<-resumed
	}
	if len(failed) != 0 {
		t.Fatalf("Redis paused 200ms on a node 10ms late (wire deadline 500ms): of %d requests, failed %v", asked, failed)
	}
	rs.Pause()
	defer rs.Resume()
	do(t, "GET", gw.url+"/api/vendor/v1/me", key).wantError(t, 503, apierr.RateLimitUnavailable)
}

// TestWindowAndQuotaCallsShedOnABusyNode: a gateway whose limiter
// senders do not get to send (a node past its capacity) while Redis is
// fine sheds a sliding window read and an order under a quota at
// redis.busy_timeout with 503 request_failed, as it sheds a GCRA read:
// the node's overload, never 503 rate_limit_unavailable (a claim that
// Redis is down), and never let through. Once the senders run again,
// each is answered 200.
func TestWindowAndQuotaCallsShedOnABusyNode(t *testing.T) {
	rs := testredis.Start(t)
	b := newTestBackend(t)
	gw := startGateway(t, b, func(o *Options) {
		o.Config.Redis.URL = config.List{rs.URL()}
		o.Config.Redis.Timeout, o.Config.Redis.WireTimeout, o.Config.Redis.BusyTimeout = 50*time.Millisecond, 100*time.Millisecond, 300*time.Millisecond
		o.Config.Limits.Vendor.Reads = config.Limit{Kind: config.KindWindow, Rate: 100000, Period: time.Minute}
		o.Config.Limits.Vendor.Orders = config.Limit{Rate: 100000, Period: time.Minute}
		o.Config.Limits.Policies = []config.Policy{
			{Name: "orders-day", Scope: config.ScopeVendor, Class: config.ClassOrders, Limit: config.Limit{Kind: config.KindQuota, Rate: 100000, Days: 1}},
		}
	})
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	asks := []struct{ what, method, path string }{
		{"sliding window read", "GET", "/api/vendor/v1/me"},
		{"order under a quota", "POST", "/api/vendor/v1/orders"},
	}
	for _, a := range asks {
		if got := do(t, a.method, gw.url+a.path, key); got.status != 200 {
			t.Fatalf("%s with Redis answering: %d %s", a.what, got.status, got.body)
		}
	}
	// The limiter's sender is held before its next round trip goes out (a
	// hook of the limiter's client); released, it sends with a wire
	// deadline of its own from then, as a sender that got its core late.
	release := make(chan struct{})
	gw.g.stores.Clients.Limiter.AddHook(&heldSender{release: release, wire: 100 * time.Millisecond})
	for _, a := range asks {
		got := do(t, a.method, gw.url+a.path, key)
		got.wantError(t, 503, apierr.RequestFailed)
	}
	close(release)
	for _, a := range asks {
		if got := do(t, a.method, gw.url+a.path, key); got.status != 200 {
			t.Fatalf("%s once the sender runs: %d %s", a.what, got.status, got.body)
		}
	}
}

// lateClock is the system's clock whose timers (the limiter transport's:
// its callers' waits, its on-time probe) fire late by late: a node that
// gets its cores late.
type lateClock struct {
	redisconn.SystemClock
	late atomic.Int64
}

func (c *lateClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

func (c *lateClock) NewTimer() redisconn.Timer { return lateTimer{c.SystemClock.NewTimer(), c} }

type lateTimer struct {
	redisconn.Timer
	c *lateClock
}

func (t lateTimer) Reset(d time.Duration) bool {
	return t.Timer.Reset(d + time.Duration(t.c.late.Load()))
}

// heldSender holds the first script call (a command or a pipeline) of a
// client until release is closed, then sends it with a deadline of wire
// from then.
type heldSender struct {
	once    sync.Once
	release chan struct{}
	wire    time.Duration
}

func (h *heldSender) hold(ctx context.Context) (context.Context, context.CancelFunc) {
	held := false
	h.once.Do(func() {
		held = true
		<-h.release
	})
	if !held {
		return ctx, func() {}
	}
	return context.WithTimeout(context.WithoutCancel(ctx), h.wire)
}

func (h *heldSender) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *heldSender) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != "evalsha" { // a ping (readiness, heartbeat) goes on
			return next(ctx, cmd)
		}
		ctx, cancel := h.hold(ctx)
		defer cancel()
		return next(ctx, cmd)
	}
}

func (h *heldSender) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		ctx, cancel := h.hold(ctx)
		defer cancel()
		return next(ctx, cmds)
	}
}
