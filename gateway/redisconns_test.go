package gateway

import (
	"strings"
	"testing"
	"time"

	"vendorgate/config"
	"vendorgate/shared/testredis"
	"vendorgate/shared/wire"
)

// TestEveryLimiterConnectionIsWatched: the limiter judges a silent Redis
// by its sockets (a request written and unanswered past redis.timeout), so
// every connection of its pool must be one it watches, the first ones of a
// new gateway too. Each of twenty new gateways (the shipped pool; a
// timeout of 250 ms and a wire deadline of 5 s, far apart) serves a read,
// then Redis is paused and the next read, on the connection the first
// used, must be refused 503 rate_limit_unavailable by the sockets' rule
// (the timeout and a look), not at the wire deadline. The node counts as
// on time unless its scheduling tick wakes a whole timeout late
// (tick_slack at its most): a late node leaves the verdict to the wire by
// design, and under make test's load a 2 ms slack is often spent. (The
// limiter's client was made with idle connections dialed at once, before
// the limiter's hook was on it: the connections dialed first were not
// watched, and a read on one waited for the wire deadline.)
func TestEveryLimiterConnectionIsWatched(t *testing.T) {
	const wire5s = 5 * time.Second
	for run := range 20 {
		rs := testredis.Start(t)
		b := newTestBackend(t)
		gw := startGateway(t, b, func(o *Options) {
			o.Config.Redis.URL = config.List{rs.URL()}
			o.Config.Redis.PoolSize = config.DefaultGateway().Redis.PoolSize
			o.Config.Redis.Timeout, o.Config.Redis.TickSlack = 250*time.Millisecond, 250*time.Millisecond
			o.Config.Redis.WireTimeout, o.Config.Redis.BusyTimeout = wire5s, wire5s
			o.Config.Redis.LeaseMax = 1 // every read asks Redis
		})
		key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
		me := gw.url + "/api/vendor/v1/me"
		if a := do(t, "GET", me, key); a.status != 200 {
			t.Fatalf("run %d, Redis answering: %d %s", run, a.status, a.body)
		}
		rs.Pause()
		start := time.Now()
		a := do(t, "GET", me, key)
		took := time.Since(start)
		rs.Resume()
		if a.status != 503 || !strings.Contains(string(a.body), "rate_limit_unavailable") {
			t.Fatalf("run %d, Redis paused: %d %s, want 503 rate_limit_unavailable", run, a.status, a.body)
		}
		// Half the wire deadline: the rule's answer comes at the timeout
		// and a look (about 0.4 s), however loaded the machine.
		if took > wire5s/2 {
			t.Fatalf("run %d: refused after %v, at the wire deadline (%v): the connection was not watched", run, took.Round(time.Millisecond), wire5s)
		}
	}
}
