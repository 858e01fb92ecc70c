// Package outage turns a dependency's failures into two log lines, the one
// when it went away and the one when it came back with what the outage
// cost, instead of a line per refused request (on a busy node, thousands a
// second, each the same). The request flow counts each request refused
// because Redis or a backend failed (Book.CountRefusal, on the failure path
// only); the readiness prober says when a dependency goes and comes back
// (Book.OnChange). Each refused request is in the access log with its error
// code, in full or in a summary line (package accesslog).
package outage

import (
	"errors"
	"log/slog"
	"sync"
	"time"

	"vendorgate/gateway/backendapi"
	"vendorgate/gateway/limit"
	"vendorgate/gateway/proxy"
)

// Book keeps the outages of a gateway's dependencies.
type Book struct {
	log *slog.Logger
	// beforeBack runs before the line that closes an outage: the access
	// log's summary lines of the outage's refusals come first.
	beforeBack func()

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

// New is a Book writing to log; beforeBack runs before each line that
// closes an outage. Neither may be nil.
func New(log *slog.Logger, beforeBack func()) (*Book, error) {
	if log == nil || beforeBack == nil {
		return nil, errors.New("outage: a logger and a beforeBack are required")
	}
	return &Book{log: log, beforeBack: beforeBack, down: make(map[string]outage)}, nil
}

// CountRefusal counts a request refused at now because a dependency failed;
// any other error is not counted.
func (b *Book) CountRefusal(err error, now time.Time) {
	var r *refusals
	switch {
	case errors.Is(err, limit.ErrUnavailable):
		r = &b.redis
	case errors.Is(err, proxy.ErrUnavailable), errors.Is(err, proxy.ErrTimeout), errors.Is(err, backendapi.ErrUnavailable):
		r = &b.backend
	default:
		return
	}
	b.mu.Lock()
	if now.Sub(r.last) > streakGap {
		r.streakFirst, r.streakBase = now, r.total
	}
	r.total++
	r.last = now
	b.mu.Unlock()
}

// OnChange is the prober's OnChange. A backend's line counts the requests
// refused for any backend over its outage (an error does not say which
// backend refused it). The outage begins at the first refusal of the
// streak in progress when the prober saw it, else then.
func (b *Book) OnChange(name string, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := &b.backend
	if name == "redis" {
		r = &b.redis
	}
	now := time.Now()
	if err != nil {
		began := outage{since: now, refused: r.total}
		if !r.last.IsZero() && now.Sub(r.last) <= streakGap {
			began = outage{since: r.streakFirst, refused: r.streakBase}
		}
		b.down[name] = began
		b.log.Warn("dependency unavailable", "dependency", name, "err", err)
		return
	}
	was, ok := b.down[name]
	delete(b.down, name)
	b.beforeBack()
	if !ok {
		b.log.Info("dependency available again", "dependency", name)
		return
	}
	b.log.Info("dependency available again", "dependency", name,
		"down_for", now.Sub(was.since).Round(time.Millisecond).String(),
		"refused_requests", r.total-was.refused)
}
