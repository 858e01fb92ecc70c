// Package throttle counts failed keys per client address and per presented
// key. Past a threshold within the window, the gateway answers 429 instead
// of 401, so guessing keys is slow. Counts live in Redis when configured
// (every replica sees the same counts), else in process. Only failures are
// counted: a valid key is never refused for its address.
//
// A Redis throttle has a bounded share of connections of its own and never
// waits for one: when they are all in use, when Redis fails a call, or
// while the limiter finds Redis down, it counts in process for a while
// (fallback.go), still answering 401 and then 429, so that nothing an
// unauthenticated client sends can take Redis from the limiter.
package throttle

import (
	"container/list"
	"context"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Thresholds are the limits of the throttle; the gateway passes the current
// ones on each call, so a reload applies at once.
type Thresholds struct {
	// PerAddress failures from one address within Window are allowed;
	// one more answers 429.
	PerAddress int
	// PerKey failures of one presented key within Window are allowed.
	PerKey int
	// Window is counted from the first failure of the window.
	Window time.Duration
}

// Verdict says whether a failure went over a threshold.
type Verdict struct {
	Over       bool
	RetryAfter time.Duration
	// Fallback, from a Redis throttle, says why this failure was counted
	// in process instead; empty when Redis counted it (or the address was
	// already known to be over its threshold), and always from the
	// in-process throttle.
	Fallback Fallback
}

// counter counts one failure for each named bucket and returns the counts
// and the time left in each bucket's window, and why they were counted in
// process when they should have been counted in Redis.
type counter interface {
	incr(keys []string, window time.Duration) ([]count, Fallback)
}

type count struct {
	n    int64
	left time.Duration
}

// Throttle counts failures.
type Throttle struct {
	c   counter
	now func() time.Time
	// over remembers, per address bucket, until when it is over its
	// threshold: a flood from an address already answered 429 costs no
	// count (no Redis call) until its window ends, as the limiter remembers
	// a denial. The answer would be 429 whatever the counts said.
	overMu sync.Mutex
	over   map[string]time.Time
}

// maxRemembered bounds the addresses remembered over their threshold;
// past it the ended ones are dropped, and if none has ended, all of them
// (they are counted again, in Redis or in process, as before).
const maxRemembered = 65536

func newThrottle(c counter, now func() time.Time) *Throttle {
	if now == nil {
		now = time.Now
	}
	return &Throttle{c: c, now: now, over: make(map[string]time.Time)}
}

// Fail counts one failed key from addr, presented as the key whose SHA-256
// is keySum (nil when no key was sent), and reports whether either count is
// now over its threshold. It always decides: a Redis throttle that cannot
// count in Redis counts in process (Verdict.Fallback says why).
func (t *Throttle) Fail(addr netip.Addr, keySum *[32]byte, th Thresholds) Verdict {
	bucket := addressBucket(addr)
	now := t.now()
	t.overMu.Lock()
	until, ok := t.over[bucket]
	t.overMu.Unlock()
	if ok && now.Before(until) {
		return Verdict{Over: true, RetryAfter: until.Sub(now)}
	}
	keys := make([]string, 1, 2)
	keys[0] = addressPrefix + bucket
	if keySum != nil {
		keys = append(keys, keyPrefix+hex.EncodeToString(keySum[:16]))
	}
	counts, fb := t.c.incr(keys, th.Window)
	v := Verdict{Fallback: fb}
	over := func(c count, limit int) {
		if c.n > int64(limit) {
			v.Over = true
			if c.left > v.RetryAfter {
				v.RetryAfter = c.left
			}
		}
	}
	over(counts[0], th.PerAddress)
	if counts[0].n > int64(th.PerAddress) && counts[0].left > 0 {
		t.remember(bucket, now.Add(counts[0].left), now)
	}
	if len(counts) > 1 {
		over(counts[1], th.PerKey)
	}
	return v
}

func (t *Throttle) remember(bucket string, until, now time.Time) {
	t.overMu.Lock()
	defer t.overMu.Unlock()
	if len(t.over) >= maxRemembered {
		for b, u := range t.over {
			if !now.Before(u) {
				delete(t.over, b)
			}
		}
		if len(t.over) >= maxRemembered {
			clear(t.over)
		}
	}
	t.over[bucket] = until
}

// addressBucket is the address itself for IPv4 and its /64 for IPv6, where
// one client holds a whole /64.
func addressBucket(a netip.Addr) string {
	if a.Is6() && !a.Is4In6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}

// Bucket name prefixes: one per address (or IPv6 /64), one per key.
const (
	addressPrefix = "vg:fk:a:"
	keyPrefix     = "vg:fk:k:"
)

// LocalOptions configures the in-process throttle.
type LocalOptions struct {
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// MaxTracked bounds the windows kept per address and, apart, per key
	// (each). Required. Past it the oldest window is dropped first, so a
	// flood of distinct addresses or keys costs bounded memory; a dropped
	// address or key starts counting again from one.
	MaxTracked int
}

// NewLocal returns an in-process throttle (a single gateway).
// It refuses options it cannot use.
func NewLocal(o LocalOptions) (*Throttle, error) {
	if o.MaxTracked <= 0 {
		return nil, fmt.Errorf("throttle: max tracked %d must be positive", o.MaxTracked)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return newThrottle(newLocalCounter(o), o.Now), nil
}

// newLocalCounter counts in process; o.MaxTracked is positive.
func newLocalCounter(o LocalOptions) *localCounter {
	return &localCounter{now: o.Now, addrs: newWindows(o.MaxTracked), keys: newWindows(o.MaxTracked)}
}

type localCounter struct {
	now         func() time.Time
	mu          sync.Mutex
	addrs, keys *windows
}

func (l *localCounter) incr(keys []string, win time.Duration) ([]count, Fallback) {
	return l.count(keys, win, l.now()), ""
}

// count counts one failure of each key at now.
func (l *localCounter) count(keys []string, win time.Duration, now time.Time) []count {
	out := make([]count, len(keys))
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, k := range keys {
		ws := l.keys
		if strings.HasPrefix(k, addressPrefix) {
			ws = l.addrs
		}
		out[i] = ws.fail(k, now, win)
	}
	return out
}

// windows is one bounded set of failure windows, kept in the order they
// started: ended windows are swept from the front and, when full, the
// oldest is dropped, both without scanning the map.
type windows struct {
	max   int
	m     map[string]*list.Element // of *window
	order list.List                // oldest first
}

type window struct {
	name string
	n    int64
	end  time.Time
}

func newWindows(max int) *windows {
	return &windows{max: max, m: make(map[string]*list.Element)}
}

// fail counts one failure of name, starting a window when it has none.
func (ws *windows) fail(name string, now time.Time, win time.Duration) count {
	for e := ws.order.Front(); e != nil; e = ws.order.Front() {
		w := e.Value.(*window)
		if now.Before(w.end) {
			break
		}
		ws.drop(e)
	}
	e, ok := ws.m[name]
	if !ok {
		for len(ws.m) >= ws.max {
			ws.drop(ws.order.Front())
		}
		e = ws.order.PushBack(&window{name: name, end: now.Add(win)})
		ws.m[name] = e
	}
	w := e.Value.(*window)
	if !now.Before(w.end) { // ended behind a longer one (the window was reloaded shorter)
		w.n, w.end = 0, now.Add(win)
		ws.order.MoveToBack(e)
	}
	w.n++
	return count{n: w.n, left: w.end.Sub(now)}
}

func (ws *windows) drop(e *list.Element) {
	delete(ws.m, e.Value.(*window).name)
	ws.order.Remove(e)
}

// redisCounter counts in Redis, one pipelined round trip a failure.
type redisCounter struct {
	client  redis.UniversalClient
	timeout time.Duration
}

// incr sends INCR, EXPIRE NX and PTTL per bucket in one pipeline: the
// window starts at the bucket's first failure.
func (r *redisCounter) incr(keys []string, win time.Duration) ([]count, error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	incrs := make([]*redis.IntCmd, len(keys))
	ttls := make([]*redis.DurationCmd, len(keys))
	_, err := r.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			incrs[i] = p.Incr(ctx, k)
			p.ExpireNX(ctx, k, win)
			ttls[i] = p.PTTL(ctx, k)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("count failed key in redis: %w", err)
	}
	out := make([]count, len(keys))
	for i := range keys {
		out[i] = count{n: incrs[i].Val(), left: ttls[i].Val()}
	}
	return out, nil
}
