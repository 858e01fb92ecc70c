package limit

// allow.go is where a request is admitted or refused: Allow, from this
// gateway's leases (lease.go) when every bucket has a token, else by the
// script in Redis (lua.go) through the transport (redisconn); a denial
// remembered in process answers first. docs/limiter-design.md says why the bound
// holds.

import (
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"

	"vendorgate/gateway/limit/redisconn"
	"vendorgate/gateway/policy"
)

// Allow is Decide for a caller that keeps its checks and decision by
// value.
func (r *Redis) Allow(cs policy.Checks) (d Decision, err error) {
	err = r.Decide(&cs, &d)
	return d, err
}

// Decide checks cs into d: from this gateway's leases when every bucket of
// the request has a token (lease.go), otherwise in Redis. Redis down,
// silent past Timeout, or the breaker open: ErrUnavailable; the node too
// busy to get an answer within BusyTimeout while Redis answers: ErrBusy;
// never an allowed Decision (d is left as a zero one). Written in place:
// a Decision is a kilobyte, which a result by value copied twice on every
// request.
func (r *Redis) Decide(cs *policy.Checks, d *Decision) error {
	d.reset(cs.Count)
	if cs.Count == 0 {
		d.Allowed = true
		return nil
	}
	now := r.now().UnixNano()
	var err error
	if r.leases != nil && r.leases.on() {
		if r.closed.Load() {
			return errLimiterClosed
		}
		var again bool
		again, err = r.allowLeased(cs, d, now, true)
		if again {
			d.reset(cs.Count)
			_, err = r.allowLeased(cs, d, now, false)
		}
	} else {
		if r.remembered(cs, nil, now, d) {
			return nil
		}
		err = r.allowRedis(cs, d)
	}
	if err != nil {
		d.reset(cs.Count)
		return err
	}
	if d.Allowed {
		return nil
	}
	for i := 0; i < cs.Count; i++ {
		if res := d.Results[i]; res.Known && !res.Allowed && !cs.List[i].Rate.Shadow && res.RetryAfter > 0 {
			r.remember(cs.List[i].Key, denial{until: now + int64(res.RetryAfter), reset: now + int64(res.ResetAfter)})
		}
	}
	return nil
}

// remembered answers cs into d from the in-process memory of denials: the
// first enforced bucket (not held, when held is given) known to refuse
// until later. It reports whether it did (d untouched when not).
func (r *Redis) remembered(cs *policy.Checks, held *[policy.MaxChecks]bool, now int64, d *Decision) bool {
	for i := 0; i < cs.Count; i++ {
		if cs.List[i].Rate.Shadow || held != nil && held[i] {
			continue
		}
		if dn, ok := r.deniedUntil(cs.List[i].Key, now); ok {
			d.reset(cs.Count)
			d.Results[i] = Result{Known: true, RetryAfter: time.Duration(dn.until - now), ResetAfter: time.Duration(dn.reset - now)}
			d.decide(cs)
			return true
		}
	}
	return false
}

// allowRedis decides cs in Redis into d, one token a bucket: no lease.
func (r *Redis) allowRedis(cs *policy.Checks, d *Decision) error {
	if r.health.Open() {
		return errOpen
	}
	want := ones
	rd, g, err := r.call(cs, &want)
	*d = rd
	seq := r.refundSeq.Load() // after the answer came
	for i := 0; i < cs.Count; i++ {
		if cs.List[i].Rate.Refund && g[i].n > 0 && d.Allowed {
			d.receipts[i] = grantReceipt(g[i], seq)
		}
	}
	return err
}

// ones asks one token of every bucket (every one of MaxChecks).
var ones = func() (a [policy.MaxChecks]int) {
	for i := range a {
		a[i] = 1
	}
	return a
}()

// errLimiterClosed answers a leased decision after Close.
var errLimiterClosed = fmt.Errorf("%w: %w", ErrUnavailable, redisconn.ErrClosed)

// errOpen answers a call the open breaker refuses.
var errOpen = fmt.Errorf("%w: breaker %s: %w", ErrUnavailable, BreakerName, gobreaker.ErrOpenState)

// allowLeased decides cs into d from the leases of its buckets, asking
// Redis for the buckets without a token (and their next lease) only
// (askLeased). A request is admitted with a token from each bucket; when
// a remembered denial, Redis refuses or fails, the tokens taken from
// leases go back to them. (A lease's tokens are spent before a denial
// remembered for its bucket: they were charged.) clock is the denial
// memory's clock. A refusal by Redis of a bucket whose lease holds tokens
// it did not honour (Redis had not answered lately) says again is worth
// it, when first: Redis has answered now.
func (r *Redis) allowLeased(cs *policy.Checks, d *Decision, clock int64, first bool) (again bool, err error) {
	var p leasedPass
	p.now = r.clock.Nanotime()
	p.epoch = r.leases.epoch.Load()
	for i := 0; i < cs.Count; i++ {
		res, t, w, ok := r.leases.take(cs.List[i].Key, p.now, !first)
		if ok {
			d.Results[i], p.tickets[i], p.held[i] = res, t, true
			continue
		}
		if tokens := cs.List[i].Rate.Tokens(); tokens > 1 {
			// lease_max counts tokens: whole requests of the cost within it.
			w = min(w, max(int(r.leases.max.Load())/tokens, 1))
		}
		p.idx[p.ask], p.want[p.ask] = i, w
		p.ask++
	}
	if p.ask > 0 {
		return r.askLeased(cs, d, &p, clock, first)
	}
	d.decide(cs)
	for i := 0; i < cs.Count; i++ {
		if cs.List[i].Rate.Refund {
			d.receipts[i] = leaseReceipt(p.tickets[i])
		}
	}
	return false, nil
}

// leasedPass is what allowLeased took from the leases: the tokens held by
// check, and the checks (ask of them) to ask Redis for, with the tokens
// wanted of each.
type leasedPass struct {
	now     int64
	epoch   uint64
	tickets [policy.MaxChecks]ticket
	held    [policy.MaxChecks]bool
	ask     int
	// want and idx by the asking's index: tokens asked, index in cs.
	want, idx [policy.MaxChecks]int
}

// giveBack returns the tokens p took from leases.
func (r *Redis) giveBack(cs *policy.Checks, p *leasedPass) {
	for i := 0; i < cs.Count; i++ {
		if p.held[i] {
			r.leases.giveBack(cs.List[i].Key, p.tickets[i], p.now)
		}
	}
}

// askLeased is allowLeased's call to Redis for the buckets p found
// without a token, and its decision from the answer and the leases'
// tokens.
func (r *Redis) askLeased(cs *policy.Checks, d *Decision, p *leasedPass, clock int64, first bool) (again bool, err error) {
	if r.remembered(cs, &p.held, clock, d) {
		r.giveBack(cs, p)
		return false, nil
	}
	if r.health.Open() {
		r.giveBack(cs, p)
		return false, errOpen
	}
	r.closing.RLock() // until the grants are in
	defer r.closing.RUnlock()
	if r.closed.Load() {
		r.giveBack(cs, p)
		return false, errLimiterClosed
	}
	var rest policy.Checks
	for j := 0; j < p.ask; j++ {
		rest.List[j] = cs.List[p.idx[j]]
	}
	rest.Count = p.ask
	rd, grants, err := r.call(&rest, &p.want)
	seq := r.refundSeq.Load() // after the answer came: see ownRefunds
	if err != nil {
		r.giveBack(cs, p)
		return false, err
	}
	now, idx := p.now, &p.idx
	// A shadow limit Redis refused while this gateway's own lease of it
	// holds tokens (not honoured on the way in: Redis had not answered
	// lately) spends one now that Redis has answered, as a refused
	// enforced limit does on the second pass (a shadow refusal refuses no
	// request: it has none).
	var spent [policy.MaxChecks]bool // by rest's index: from the lease after all
	for j := 0; j < rest.Count; j++ {
		i := idx[j]
		d.Results[i] = rd.Results[j]
		if c := &rest.List[j]; c.Rate.Shadow && !rd.Results[j].Allowed {
			if res, t, _, ok := r.leases.take(c.Key, now, true); ok {
				d.Results[i], p.tickets[i], p.held[i], spent[j] = res, t, true, true
			}
		}
	}
	d.decide(cs)
	if !d.Allowed {
		r.giveBack(cs, p)
		if first {
			for j := 0; j < rest.Count; j++ {
				if res := rd.Results[j]; !res.Allowed && !rest.List[j].Rate.Shadow && r.leases.holds(rest.List[j].Key, now) {
					return true, nil
				}
			}
		}
		return false, nil
	}
	done := r.clock.Nanotime()
	for j := 0; j < rest.Count; j++ {
		if spent[j] {
			continue // nothing granted, its demand counted by take
		}
		c := &rest.List[j]
		g := grants[j]
		own, leased := r.leases.grant(c.Key, c.Rate, rd.Results[j], g, seq, p.epoch, now, done)
		if c.Rate.Refund && g.n > 0 {
			if leased {
				d.receipts[idx[j]] = leaseReceipt(own)
			} else {
				d.receipts[idx[j]] = grantReceipt(g, seq)
			}
		}
		if extra := g.n - 1; extra > 0 {
			// The header counts the lease as this gateway's remaining.
			res := &d.Results[idx[j]]
			res.Remaining = min(res.Remaining+extra, capacity(c.Rate))
			res.ResetAfter = max(res.ResetAfter-time.Duration(int64(extra)*interval(c.Rate)), 0)
		}
	}
	for i := 0; i < cs.Count; i++ {
		if p.held[i] && cs.List[i].Rate.Refund {
			d.receipts[i] = leaseReceipt(p.tickets[i])
		}
	}
	return false, nil
}

// grant is what the script granted one bucket of an allowed call: n
// tokens (the request's own and a lease of the rest; 0 when refused), the
// bucket's TAT after them and the TIME of the run that charged them (its
// TAT less its reset, within a microsecond), µs since 2017.
type grant struct {
	n     int
	tatUS int64
	atUS  int64
}

// call makes the one round trip of a decision: through the pipeline, whose
// sender reports each round trip to the breaker itself, or alone. want is
// the tokens asked of each bucket.
func (r *Redis) call(cs *policy.Checks, want *[policy.MaxChecks]int) (Decision, [policy.MaxChecks]grant, error) {
	start := time.Now()
	var d Decision
	var g [policy.MaxChecks]grant
	var err error
	if r.leases != nil { // Pipeline: leases, and the pipeline unless simulated
		var v []any
		if r.conn != nil {
			c := r.conn.Call()
			c.NKeys, c.NArgs, c.NValues = cs.Count, argsPerKey*cs.Count, valuesPerKey*cs.Count
			for i := 0; i < cs.Count; i++ {
				c.Keys[i] = keyPrefix + cs.List[i].Key
				setArgs(c.Args[argsPerKey*i:argsPerKey*(i+1)], cs.List[i].Rate, want[i])
			}
			v, err = r.conn.Do(c)
		} else {
			v, err = r.tripCall(*cs, *want) // by value: cs must not escape
		}
		if err == nil {
			d, g, err = batchDecisionOf(cs, v)
		}
	} else {
		d, g, err = r.callAlone(cs)
	}
	r.observe(time.Since(start), err)
	switch {
	case err == nil:
	case errors.Is(err, ErrBusy):
		r.health.Busy()
		return Decision{}, g, err
	default:
		return Decision{}, g, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	d.decide(cs)
	if d.Allowed && r.charged != nil {
		n := 0
		for i := 0; i < cs.Count; i++ {
			if g[i].n > 0 {
				n++
			}
		}
		r.charged(n)
	}
	return d, g, nil
}

// tripCall is a decision's call through rt, in place of the pipeline (a
// simulation's): a round trip that failed drops the leases, as the
// pipeline's sender does; a caller that gave up (silent, busy) drops
// nothing itself.
func (r *Redis) tripCall(cs policy.Checks, want [policy.MaxChecks]int) ([]any, error) {
	keys, args := scriptArgs(&cs, &want)
	v, err := r.rt(true, r.timeout, [][]string{keys}, [][]any{args})
	switch {
	case err == nil:
		return v[0], nil
	case !errors.Is(err, ErrBusy) && !errors.Is(err, redisconn.ErrSilent):
		r.health.Failed(err)
	}
	return nil, err
}

// callAlone makes the call on a connection of its own (Conn.Once), one
// token a bucket.
func (r *Redis) callAlone(cs *policy.Checks) (Decision, [policy.MaxChecks]grant, error) {
	var ones [policy.MaxChecks]int
	for i := range ones {
		ones[i] = 1
	}
	keys, args := scriptArgs(cs, &ones)
	v, err := r.conn.Once(keys, args)
	if err != nil {
		return Decision{}, [policy.MaxChecks]grant{}, err
	}
	return batchDecisionOf(cs, v)
}

// scriptArgs lays out one script call of its own for cs, asking want[i]
// tokens of check i: the keys, then the count of keys and each key's
// arguments.
func scriptArgs(cs *policy.Checks, want *[policy.MaxChecks]int) ([]string, []any) {
	keys := make([]string, cs.Count)
	args := make([]any, 1+argsPerKey*cs.Count)
	args[0] = cs.Count
	for i := 0; i < cs.Count; i++ {
		keys[i] = keyPrefix + cs.List[i].Key
		setArgs(args[1+argsPerKey*i:1+argsPerKey*(i+1)], cs.List[i].Rate, want[i])
	}
	return keys, args
}

// batchDecisionOf reads cs's part of the script's answer: six integers
// per key, times in microseconds.
func batchDecisionOf(cs *policy.Checks, v []any) (Decision, [policy.MaxChecks]grant, error) {
	var d Decision
	var g [policy.MaxChecks]grant
	if len(v) != valuesPerKey*cs.Count {
		return d, g, fmt.Errorf("limit script answered %d values for %d keys", len(v), cs.Count)
	}
	for i := 0; i < cs.Count; i++ {
		var x [valuesPerKey]int64
		for j := range x {
			n, ok := v[valuesPerKey*i+j].(int64)
			if !ok {
				return Decision{}, g, fmt.Errorf("limit script answered %T, want an integer", v[valuesPerKey*i+j])
			}
			x[j] = n
		}
		allowed, rem, retry, reset := x[0] == 1, x[1], x[2], x[3]
		d.Results[i] = Result{Known: true, Allowed: allowed, Remaining: int(rem), ResetAfter: time.Duration(reset) * time.Microsecond}
		if !allowed {
			d.Results[i].RetryAfter = time.Duration(retry) * time.Microsecond
		}
		g[i] = grant{n: int(x[4]), tatUS: x[5], atUS: x[5] - x[3]}
	}
	return d, g, nil
}

func (r *Redis) shard(key string) *deniedShard {
	return &r.denied[maphash.String(r.seed, key)%localShards]
}

func (r *Redis) deniedUntil(key string, now int64) (denial, bool) {
	sh := r.shard(key)
	sh.mu.RLock()
	dn, ok := sh.m[key]
	sh.mu.RUnlock()
	if !ok || dn.until <= now {
		return denial{}, false
	}
	return dn, true
}

func (r *Redis) remember(key string, dn denial) {
	sh := r.shard(key)
	sh.mu.Lock()
	if len(sh.m) >= 1024 { // bounded: drop the denials that have ended
		now := r.now().UnixNano()
		for k, v := range sh.m {
			if v.until <= now {
				delete(sh.m, k)
			}
		}
	}
	sh.m[key] = dn
	sh.mu.Unlock()
}

// deniedShard is one shard of the in-process memory of denials.
type deniedShard struct {
	mu sync.RWMutex
	m  map[string]denial
}

type denial struct{ until, reset int64 } // unix ns
