package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

// Flood kinds: what a gateway in front of many vendors must answer cheaply.
const (
	// floodOver is one vendor far over its limit (one request an hour) at
	// full speed: every answer a 429, and while the denial is remembered in
	// process not one Redis call.
	floodOver = "one vendor over its limit"
	// floodUnknown is well-formed keys with a wrong MAC from one address:
	// refused without asking the backend.
	floodUnknown = "unknown keys, one address"
)

// redisCallsMetric counts the limiter's calls to Redis (the count of its
// duration histogram).
const redisCallsMetric = "vendorgate_gateway_redis_call_duration_seconds_count"

// floodFigure is one flood run against one gateway row.
type floodFigure struct {
	row, kind string
	redis     bool // the row limits in Redis
	m         measurement
	// statuses are the gateway's answers by status over the run, from its
	// metrics (nil when unreadable).
	statuses map[string]float64
	// lookups is the backend's key lookups over the run (-1: unread).
	lookups float64
	// limiterCalls is the limiter's calls to Redis over the run as the
	// gateway counts them (its Redis call histogram; -1: unread): Redis'
	// own script count also holds the usage flushes, a few per minute.
	limiterCalls float64
	err          error
}

// floods runs both floods against every gateway row, once each.
func (b *bench) floods(ctx context.Context, res *results) error {
	if b.opts.floodConns <= 0 {
		return nil
	}
	for _, r := range b.active() {
		if r.admin == "" {
			continue
		}
		for _, kind := range []string{floodOver, floodUnknown} {
			if err := ctx.Err(); err != nil {
				return err
			}
			if time.Now().Add(b.opts.duration).After(b.started.Add(b.opts.maxTime)) {
				res.notes = append(res.notes, fmt.Sprintf("flood %q on %s not run: -max-time %s reached", kind, r.label(), b.opts.maxTime))
				continue
			}
			f := b.flood1(r, kind)
			if f.err != nil {
				b.logf("%s, flood %q: %v", r.label(), kind, f.err)
			} else {
				b.logf("%s, flood %q: %.0f answers/s %s", r.label(), kind, f.answersPerSecond(), f.statusList())
			}
			res.floods = append(res.floods, f)
		}
	}
	return nil
}

func (b *bench) flood1(r *row, kind string) floodFigure {
	f := floodFigure{row: r.id, kind: kind, redis: r.redis != nil, lookups: -1, limiterCalls: -1}
	keys := b.unknown
	if kind == floodOver {
		keys = b.flood
		// Spend the vendor's one request, then see the denial: from here
		// on it is remembered, and the run measures the remembered path.
		for i, want := range []int{fasthttp.StatusOK, fasthttp.StatusTooManyRequests} {
			code, err := b.get(r.url, keys.keys[0])
			for try := 0; err == nil && code == fasthttp.StatusServiceUnavailable && try < 5; try++ {
				time.Sleep(100 * time.Millisecond) // the limiter past its timeout on a busy machine
				code, err = b.get(r.url, keys.keys[0])
			}
			if err != nil {
				f.err = err
				return f
			}
			if code != want && !(i == 0 && code == fasthttp.StatusTooManyRequests) {
				f.err = fmt.Errorf("request %d of the flood vendor answered %d, want %d", i+1, code, want)
				return f
			}
		}
	}
	before := gatewayOutcomes(r)
	lookupsBefore, lErr := metricValue(b.backendAddr, lookupMetric)
	callsBefore, cErr := metricValue(r.admin, redisCallsMetric)
	f.m, f.err = b.runLoad(r, keys, b.opts.floodConns, nil)
	if f.err != nil {
		return f
	}
	if callsAfter, err := metricValue(r.admin, redisCallsMetric); err == nil && cErr == nil && f.redis {
		f.limiterCalls = callsAfter - callsBefore
	}
	if lookupsAfter, err := metricValue(b.backendAddr, lookupMetric); err == nil && lErr == nil {
		f.lookups = lookupsAfter - lookupsBefore
	}
	if after := gatewayOutcomes(r); before != nil && after != nil {
		f.statuses = map[string]float64{}
		for k, v := range after {
			if code, ok := strings.CutPrefix(k, "status "); ok {
				if d := v - before[k]; d > 0 {
					f.statuses[code] = d
				}
			}
		}
	}
	return f
}

// get sends one request with key through url and returns the status.
func (b *bench) get(url, key string) (int, error) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(url)
	req.Header.Set("X-API-Key", key)
	if err := fasthttp.DoTimeout(req, resp, 5*time.Second); err != nil {
		return 0, err
	}
	return resp.StatusCode(), nil
}

// answers is every request answered, whatever its status.
func (f floodFigure) answers() int64 { return f.m.Requests }

func (f floodFigure) answersPerSecond() float64 {
	if f.m.Elapsed <= 0 {
		return 0
	}
	return float64(f.answers()) / f.m.Elapsed.Seconds()
}

// perSecond is the answers of status code per second: the load
// generator's answers per second times the share of code among the
// gateway's answers over the run (its metrics window is a little wider
// than the generator's); -1 when they were not read.
func (f floodFigure) perSecond(code string) float64 {
	total := 0.0
	for _, n := range f.statuses {
		total += n
	}
	if total == 0 {
		return -1
	}
	return f.answersPerSecond() * f.statuses[code] / total
}

// statusList is "401: 12, 429: 3456" (the gateway's counts).
func (f floodFigure) statusList() string {
	if f.statuses == nil {
		return "statuses not read"
	}
	codes := make([]string, 0, len(f.statuses))
	for c := range f.statuses {
		codes = append(codes, c)
	}
	sort.Strings(codes)
	parts := make([]string, len(codes))
	for i, c := range codes {
		parts[i] = fmt.Sprintf("%s: %.0f", c, f.statuses[c])
	}
	return strings.Join(parts, ", ")
}
