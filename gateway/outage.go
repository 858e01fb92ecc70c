package gateway

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"vendorgate/gateway/backendapi"
	"vendorgate/gateway/limit"
	"vendorgate/gateway/proxy"
)

// outages turns a dependency's failures into two log lines, the one when it
// went away and the one when it came back with what the outage cost,
// instead of a line per refused request (on a busy node, thousands a
// second, each the same). Refused requests are counted here, on the
// failure path only; each still has its access log line with its error
// code.
type outages struct {
	// refused counts the requests answered 503/504 because of Redis
	// (rate_limit_unavailable) and because of a backend (request_failed).
	redisRefused, backendRefused atomic.Uint64

	mu   sync.Mutex
	down map[string]outage // by dependency name, while it is unavailable
}

// outage is one dependency's outage in progress.
type outage struct {
	since   time.Time
	refused uint64 // the refused counter when it began
}

// countRefusal counts a request refused because a dependency failed.
func (o *outages) countRefusal(err error) {
	switch {
	case errors.Is(err, limit.ErrUnavailable):
		o.redisRefused.Add(1)
	case errors.Is(err, proxy.ErrUnavailable), errors.Is(err, proxy.ErrTimeout), errors.Is(err, backendapi.ErrUnavailable):
		o.backendRefused.Add(1)
	}
}

// onDependencyChange is the prober's OnChange. A backend's line counts the
// requests refused for any backend over its outage (an error does not say
// which backend refused it).
func (g *Gateway) onDependencyChange(name string, err error) {
	refused := &g.outages.backendRefused
	if name == "redis" {
		refused = &g.outages.redisRefused
	}
	o := &g.outages
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.down == nil {
		o.down = make(map[string]outage)
	}
	if err != nil {
		o.down[name] = outage{since: time.Now(), refused: refused.Load()}
		g.log.Warn("dependency unavailable", "dependency", name, "err", err)
		return
	}
	was, ok := o.down[name]
	delete(o.down, name)
	if !ok {
		g.log.Info("dependency available again", "dependency", name)
		return
	}
	g.log.Info("dependency available again", "dependency", name,
		"down_for", time.Since(was.since).Round(time.Millisecond).String(),
		"refused_requests", refused.Load()-was.refused)
}
