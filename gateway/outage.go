package gateway

import (
	"errors"
	"sync"
	"time"

	"vendorgate/gateway/backendapi"
	"vendorgate/gateway/limit"
	"vendorgate/gateway/proxy"
)

// outages turns a dependency's failures into two log lines, the one when it
// went away and the one when it came back with what the outage cost,
// instead of a line per refused request (on a busy node, thousands a
// second, each the same). Refused requests are counted here, on the
// failure path only; each is in the access log with its error code, in
// full or in a summary line (refusalLog).
type outages struct {
	mu sync.Mutex
	// The requests answered 503/504 because of Redis
	// (rate_limit_unavailable) and because of a backend (request_failed).
	redis, backend refusals
	down           map[string]outage // by dependency name, while it is unavailable
}

// refusals counts one dependency's refused requests, and the streak in
// progress: refusals less than streakGap apart. The prober finds an
// outage up to a probe interval and a probe's timeout after the first
// request it refused; the outage is counted from that first refusal.
type refusals struct {
	total       uint64
	last        time.Time // the latest refusal
	streakFirst time.Time // the first refusal of the streak
	streakBase  uint64    // total before it
}

// streakGap is the longest gap between two refusals of one streak: more
// than the prober takes to see an outage (its 1s interval and a backend
// probe's 1s timeout).
const streakGap = 3 * time.Second

// outage is one dependency's outage in progress.
type outage struct {
	since   time.Time
	refused uint64 // the refused total when it began
}

// countRefusal counts a request refused at now because a dependency failed.
func (o *outages) countRefusal(err error, now time.Time) {
	var r *refusals
	switch {
	case errors.Is(err, limit.ErrUnavailable):
		r = &o.redis
	case errors.Is(err, proxy.ErrUnavailable), errors.Is(err, proxy.ErrTimeout), errors.Is(err, backendapi.ErrUnavailable):
		r = &o.backend
	default:
		return
	}
	o.mu.Lock()
	if now.Sub(r.last) > streakGap {
		r.streakFirst, r.streakBase = now, r.total
	}
	r.total++
	r.last = now
	o.mu.Unlock()
}

// onDependencyChange is the prober's OnChange. A backend's line counts the
// requests refused for any backend over its outage (an error does not say
// which backend refused it). The outage begins at the first refusal of the
// streak in progress when the prober saw it, else then.
func (g *Gateway) onDependencyChange(name string, err error) {
	o := &g.outages
	o.mu.Lock()
	defer o.mu.Unlock()
	r := &o.backend
	if name == "redis" {
		r = &o.redis
	}
	if o.down == nil {
		o.down = make(map[string]outage)
	}
	now := time.Now()
	if err != nil {
		began := outage{since: now, refused: r.total}
		if !r.last.IsZero() && now.Sub(r.last) <= streakGap {
			began = outage{since: r.streakFirst, refused: r.streakBase}
		}
		o.down[name] = began
		g.log.Warn("dependency unavailable", "dependency", name, "err", err)
		return
	}
	was, ok := o.down[name]
	delete(o.down, name)
	g.refusals.flush(g.log) // the outage's summary lines before the line that closes it
	if !ok {
		g.log.Info("dependency available again", "dependency", name)
		return
	}
	g.log.Info("dependency available again", "dependency", name,
		"down_for", now.Sub(was.since).Round(time.Millisecond).String(),
		"refused_requests", r.total-was.refused)
}
