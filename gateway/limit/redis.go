package limit

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"vendorgate/gateway/breaker"
)

// keyPrefix is redis_rate's key prefix: the script keeps redis_rate's
// buckets, so that gateways of an older release (which called redis_rate)
// share them during a rolling upgrade.
const keyPrefix = "rate:"

// RedisOptions configures a Redis limiter.
type RedisOptions struct {
	// Client is a plain, Sentinel or Cluster client. It should have
	// MaxRetries -1: a retried EVALSHA can charge a bucket twice.
	Client redis.UniversalClient
	// Timeout is how long a request waits on a silent Redis. Default 50ms:
	// past it, with no answer from Redis to anyone meanwhile, the request
	// fails closed instead of queueing behind a sick Redis.
	Timeout time.Duration
	// WireTimeout bounds one pipelined round trip on the wire (its socket
	// deadline, set when the batch is sent); past it the round trip is one
	// failure for the breaker. Default 500ms, at least Timeout: a sender
	// that got its core late must find the reply still readable, not an
	// i/o timeout with the reply already in the socket buffer. The client
	// should have ReadTimeout and WriteTimeout at least this long.
	WireTimeout time.Duration
	// BusyTimeout is how long in all a request may wait while Redis is
	// visibly answering (round trips answered meanwhile) though its own
	// Timeout passed: the node is busy, not Redis. Past it the request
	// fails with ErrBusy. Default 1s, at least Timeout.
	BusyTimeout time.Duration
	// TickSlack is how late the node's 5ms scheduling probe may wake and
	// still count as on time: only a node on time through the last second
	// calls a silent Redis down at Timeout; a late one leaves the verdict
	// to WireTimeout (see lateness and batcher.silent). Required with
	// Pipeline; config's default is 2ms.
	TickSlack time.Duration
	// BreakerOpenFor is how long the breaker stays open before it lets one
	// probe through. Default 2s.
	BreakerOpenFor time.Duration
	// BreakerFailures is how many failed round trips (a batch is one)
	// within BreakerWindow open the breaker: in a row, or when they are
	// also at least BreakerFailureRatio of the round trips that finished in
	// it. Default 3.
	BreakerFailures int
	// BreakerWindow is the rolling window of the failure ratio. Default 3s.
	// (Failures in a row open the breaker whenever they ended.)
	BreakerWindow time.Duration
	// BreakerFailureRatio is the share of failed round trips within the
	// window that opens the breaker. Default 0.5: one late round trip among
	// many answered ones opens nothing; a dead Redis fails them all.
	BreakerFailureRatio float64
	// OnStateChange is told of every breaker transition (metrics, logs). It
	// runs under the breaker's lock: it must not call back into the breaker.
	OnStateChange func(name string, from, to gobreaker.State)
	// OnBreakerOpen is told why the breaker opened, after OnStateChange:
	// the kind of the failure that opened it, a sentence for the log, and
	// whether it opened again after a failed half-open probe (an outage
	// going on) rather than from closed. It runs under the breaker's lock
	// too.
	OnBreakerOpen func(kind FailureKind, why string, reopened bool)
	// ObserveCall is told the duration and error of every limiter call
	// (one per request that asked Redis).
	ObserveCall func(d time.Duration, err error)
	// OnFailure is told of every failed round trip to Redis (a batch is
	// one), with its kind.
	OnFailure func(kind FailureKind, err error)
	// OnUnsent is told of every call given up before it was sent (its
	// request failed without being charged).
	OnUnsent func()
	// OnBusy is told of every call that failed with ErrBusy.
	OnBusy func()
	// Now is the clock of the in-process denial memory; time.Now when nil.
	Now func() time.Time
	// Pipeline sends the calls of concurrent requests together, as one
	// pipelined write of script calls answered in one read (see batcher).
	// Off: one round trip per request on its own pooled connection.
	Pipeline bool
	// PipelineMax bounds the calls in one pipeline. Default 128.
	PipelineMax int
	// PipelineSenders is how many pipelines may be in flight at once.
	// Default 2: on a small machine more senders mean smaller batches.
	PipelineSenders int
	// LeaseMax is the most tokens one call takes of a bucket: the request's
	// own and a lease of the rest, decided here without asking Redis (see
	// leases). 1 is no lease: every request asks Redis, strictly exact;
	// below 1 is 1. The gateway passes config's redis.lease_max (16).
	// Leases need Pipeline.
	LeaseMax int
	// LeaseTTL is how long a lease lives, from its call: what is left then
	// goes back. Admissions stay within what GCRA allows with a burst of
	// burst + ceil(rate × LeaseTTL). The gateway passes config's
	// redis.lease_ttl (2s); zero here is 1s.
	LeaseTTL time.Duration
	// Leases are told what happens to leased tokens.
	Leases LeaseHooks
	// OnCharged is told how many buckets each allowed call charged in
	// Redis (the script's own count).
	OnCharged func(n int)
}

// BreakerName is the name of the limiter's breaker in metrics.
const BreakerName = "redis"

// Redis is the shared limiter: GCRA in Redis by one script (lua.go)
// applying redis_rate's arithmetic, with its stored value, to every limit
// of a request in one round trip. A denial is remembered in process until its
// RetryAfter, so a vendor known to be over its limit costs no Redis call.
type Redis struct {
	client    redis.UniversalClient
	timeout   time.Duration
	wire      time.Duration
	cb        *gobreaker.TwoStepCircuitBreaker[Decision]
	hooks     *hooks
	observe   func(time.Duration, error)
	now       func() time.Time
	seed      maphash.Seed
	denied    [localShards]deniedShard
	closeOnce sync.Once
	batch     *batcher // nil without Pipeline
	leases    *leases  // nil without Pipeline
	charged   func(n int)
	// returnAll asks the lease loop to send every lease back (a reload).
	returnAll atomic.Bool
	// closing is read-held by each leased decision's Redis call and its
	// grants; Close sets closed under it, so that the last refunds come
	// after every grant and no lease is spent after Close.
	closing sync.RWMutex
	closed  atomic.Bool
	// cluster: leases are honoured only while every master answers the
	// lease loop's pings; pinged is when the last ping that all answered
	// was sent (clock's time).
	cluster bool
	pinged  atomic.Int64
	// clock is the lease logic's time; heard is when a byte was last read
	// from Redis, on any connection (clock's time).
	clock clock
	heard *atomic.Int64
	// rt, when set, replaces the batcher and the client (see roundTrip).
	rt roundTrip
	// The lease loop: one beat at a time under loopMu, each arming the next
	// (see leaseTick); stopBeat cancels the next; lastSweep is the last
	// sweep of expired leases.
	loopMu    sync.Mutex
	loopOff   bool
	stopBeat  func() bool
	beatEvery time.Duration
	lastSweep int64
}

// clock is the time of the lease logic (a lease's life, a bucket's demand,
// whether Redis answered lately, the heartbeat) and of the sockets'
// evidence: monotonic nanoseconds, so that a wall clock stepped by the
// system moves none of it, and the timer of the lease loop's beat. The
// limiter's is the system's; a simulation brings its own.
type clock interface {
	Nanotime() int64
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// systemClock is the system's monotonic time since epoch.
type systemClock struct{ epoch time.Time }

func (c systemClock) Nanotime() int64 { return int64(time.Since(c.epoch)) }

func (systemClock) AfterFunc(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }

// roundTrip is one round trip to Redis: the script run once per group of
// keys and args (one group per hash slot), or, with no group, a ping of
// every node the buckets live on; it returns each group's reply. A
// decision's call (judged) is waited for as the batcher waits: failed
// only when Redis was silent past Timeout; a ping and refunds wait up to
// deadline. The limiter's own is the batcher (decisions) and the client
// (the rest); a simulation brings its own, to decide delay, order and
// loss.
type roundTrip func(judged bool, deadline time.Duration, keys [][]string, args [][]any) ([][]any, error)

type deniedShard struct {
	mu sync.RWMutex
	m  map[string]denial
}

type denial struct{ until, reset int64 } // unix ns

// NewRedis returns a Redis limiter behind its own breaker.
func NewRedis(o RedisOptions) (*Redis, error) {
	return newRedis(o, systemClock{epoch: time.Now()}, nil)
}

// newRedis is NewRedis on clock; with rt (a simulation) the limiter has
// no batcher, starts no goroutine of its own and needs no client.
func newRedis(o RedisOptions, clk clock, rt roundTrip) (*Redis, error) {
	if o.Client == nil && rt == nil {
		return nil, errors.New("limit: redis client required")
	}
	if o.Timeout <= 0 {
		o.Timeout = 50 * time.Millisecond
	}
	if o.BreakerOpenFor <= 0 {
		o.BreakerOpenFor = 2 * time.Second
	}
	if o.BreakerFailures <= 0 {
		o.BreakerFailures = 3
	}
	if o.BreakerWindow <= 0 {
		o.BreakerWindow = 3 * time.Second
	}
	if o.BreakerFailureRatio <= 0 || o.BreakerFailureRatio > 1 {
		o.BreakerFailureRatio = 0.5
	}
	if o.WireTimeout <= 0 {
		o.WireTimeout = 500 * time.Millisecond
	}
	o.WireTimeout = max(o.WireTimeout, o.Timeout)
	if o.BusyTimeout <= 0 {
		o.BusyTimeout = time.Second
	}
	o.BusyTimeout = max(o.BusyTimeout, o.Timeout)
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.ObserveCall == nil {
		o.ObserveCall = func(time.Duration, error) {}
	}
	h := &hooks{failure: o.OnFailure, unsent: o.OnUnsent, busy: o.OnBusy, open: o.OnBreakerOpen}
	r := &Redis{
		client:  o.Client,
		timeout: o.Timeout,
		wire:    o.WireTimeout,
		hooks:   h,
		observe: o.ObserveCall,
		now:     o.Now,
		seed:    maphash.MakeSeed(),
		charged: o.OnCharged,
		clock:   clk,
		rt:      rt,
	}
	r.cb = breaker.NewTwoStep[Decision](breaker.Settings{Name: BreakerName, Failures: o.BreakerFailures,
		Window: o.BreakerWindow, FailureRatio: o.BreakerFailureRatio, OpenFor: o.BreakerOpenFor,
		OnTrip:        func(c gobreaker.Counts) { h.counts = c },
		Excluded:      notRedis, // the gateway read late, or its pool was full: not Redis' failure
		OnStateChange: h.onStateChange(o.OnStateChange, o.BreakerWindow.String())})
	for i := range r.denied {
		r.denied[i].m = make(map[string]denial)
	}
	if o.Pipeline {
		if o.TickSlack <= 0 && rt == nil {
			return nil, errors.New("limit: a pipelined limiter needs a positive TickSlack")
		}
		if o.PipelineMax <= 0 {
			o.PipelineMax = 128
		}
		if o.PipelineSenders <= 0 {
			o.PipelineSenders = 2
		}
		_, r.cluster = o.Client.(*redis.ClusterClient)
		r.pinged.Store(math.MinInt64 / 2)
		r.leases = newLeases(o.LeaseMax, o.LeaseTTL, func() bool {
			now := r.clock.Nanotime()
			return now-r.heard.Load() <= int64(o.Timeout) && (!r.cluster || now-r.pinged.Load() <= int64(o.Timeout))
		}, o.Leases)
		h.lost = r.leases.drop // before the senders start
		if rt == nil {
			r.batch = newBatcher(o.Client, &o, r.cb, h, clk)
			r.heard = &r.batch.conns.lastRead
			r.rt = r.clientTrip
		} else {
			r.heard = new(atomic.Int64)
			r.heard.Store(math.MinInt64 / 2)
		}
		r.beatEvery = max(o.Timeout/2, 5*time.Millisecond)
		r.loopMu.Lock()
		r.stopBeat = clk.AfterFunc(r.beatEvery, r.beat)
		r.loopMu.Unlock()
	}
	return r, nil
}

// SetLeases changes LeaseMax and LeaseTTL (a reload) and sends every
// lease held back to Redis: they were taken under the old limits.
func (r *Redis) SetLeases(max int, ttl time.Duration) {
	if r.leases == nil {
		return
	}
	r.leases.set(max, ttl)
	r.returnAll.Store(true)
}

// Close waits for the leased decisions under way, sends the leases back,
// then stops the pipelining goroutines (when Pipeline is on); calls made
// afterwards fail with ErrUnavailable. It does not close the client.
func (r *Redis) Close() {
	if r.leases == nil {
		return
	}
	r.closeOnce.Do(func() {
		r.closing.Lock() // the grants under way are in
		r.closed.Store(true)
		r.closing.Unlock()
		r.loopMu.Lock() // after the beat under way
		r.loopOff = true
		r.stopBeat()
		r.sendRefunds(r.leases.sweep(r.clock.Nanotime(), true))
		r.loopMu.Unlock()
		if r.batch != nil {
			r.batch.close()
		}
	})
}

// beat is one beat of the lease loop, which arms the next.
func (r *Redis) beat() {
	r.loopMu.Lock()
	defer r.loopMu.Unlock()
	if r.loopOff {
		return
	}
	r.leaseTick()
	r.stopBeat = r.clock.AfterFunc(r.beatEvery, r.beat)
}

// leaseTick keeps the leases honest, every beat (half the timeout): a
// heartbeat to Redis while leases are held and nothing else was answered
// within the beat, or with a Cluster to every master (another node's
// answers say nothing of a bucket's own; a failed heartbeat drops every
// lease); every quarter lease period, the refunds of expired leases; at a
// reload, the refunds of them all (at Close too, see Close).
func (r *Redis) leaseTick() {
	now := r.clock.Nanotime()
	if r.leases.held(now) && (r.cluster || now-r.heard.Load() > int64(r.beatEvery)) {
		// A ping waits as a request does on a silent Redis: the timeout
		// and Redis' slowest recent answer (on the wall clock: the
		// on-time clock does not bound a socket's deadline); an answer read late (it waited in the
		// socket past the deadline) is the node's lateness, not Redis'
		// (whether Redis answered in time is what heard and pinged tell
		// the leases). A failed ping is a Redis failure: counted, and every
		// lease dropped with it.
		switch _, err := r.rt(false, r.timeout+r.Grace(), nil, nil); {
		case err == nil:
			r.pinged.Store(now)
		case replyLate(err):
		default:
			r.hooks.onFailure(err)
		}
	}
	all := r.returnAll.Swap(false)
	if all || now-r.lastSweep >= r.leases.ttl.Load()/4 {
		r.lastSweep = now
		r.sendRefunds(r.leases.sweep(now, all))
	}
}

// clientTrip is the limiter's roundTrip over its client, for pings and
// refunds (decisions go through the batcher).
func (r *Redis) clientTrip(_ bool, deadline time.Duration, keys [][]string, args [][]any) ([][]any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	if len(keys) == 0 {
		late := r.batch.conns.lateReads.Load()
		err := r.ping(ctx)
		if err != nil && KindOf(err) == FailTimeout && r.batch.conns.lateReads.Load() != late {
			err = fmt.Errorf("%w: %w", errReadLate, err)
		}
		return nil, err
	}
	_, err := runScripts(ctx, r.client, keys, args)
	return nil, err
}

// ping asks every Redis the limiter's buckets live on (each master of a
// Cluster) whether it answers.
func (r *Redis) ping(ctx context.Context) error {
	if c, ok := r.client.(*redis.ClusterClient); ok {
		return c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return n.Ping(ctx).Err() })
	}
	return r.client.Ping(ctx).Err()
}

// refundsPerScript bounds the keys of one refund script: the script reads
// its keys with one MGET of them all, and Lua unpacks at most about 8,000
// values at once.
const refundsPerScript = 1000

// sendRefunds sends unused lease tokens back in one script run (one per
// hash slot with a Cluster, and one per refundsPerScript keys, pipelined).
// A refund that fails is lost: the tokens come back as the bucket refills.
func (r *Redis) sendRefunds(refs []refund) {
	if len(refs) == 0 || r.cb.State() == gobreaker.StateOpen {
		return
	}
	var keys [][]string
	var args [][]any
	index := make(map[uint16]int) // a slot's script still filling
	for _, f := range refs {
		var s uint16
		if r.cluster {
			s = slot(f.key)
		}
		i, ok := index[s]
		if !ok || len(keys[i]) == refundsPerScript {
			i = len(keys)
			index[s] = i
			keys, args = append(keys, nil), append(args, nil)
		}
		keys[i] = append(keys[i], f.key)
		args[i] = append(args[i], 0, f.emission, f.unused, f.tatGrantUS, f.after)
	}
	_, _ = r.rt(false, r.wire, keys, args)
}

// Lateness is the node's recent scheduling lateness: how late, at most,
// the gateway's goroutines woke over about the last second (a probe's
// short sleeps, callers' timers). Zero without Pipeline.
func (r *Redis) Lateness() time.Duration {
	if r.batch == nil {
		return 0
	}
	return r.batch.late.Lateness()
}

// Grace is how much longer than Timeout, on the node's on-time clock, a
// silent Redis is waited for now (at most BusyTimeout in all) before a
// request fails closed: the slowest answer Redis gave over the last
// second (see lateness). About zero on a quiet node; zero without
// Pipeline.
func (r *Redis) Grace() time.Duration {
	if r.batch == nil {
		return 0
	}
	return r.batch.late.Grace()
}

// State is the breaker's state; reading it also moves an open breaker whose
// time is up to half-open.
func (r *Redis) State() gobreaker.State { return r.cb.State() }

// Allow checks cs: from this gateway's leases when every bucket of the
// request has a token (lease.go), otherwise in Redis. Redis down, silent
// past Timeout, or the breaker open: ErrUnavailable; the node too busy to
// get an answer within BusyTimeout while Redis answers: ErrBusy; never an
// allowed Decision.
func (r *Redis) Allow(cs Checks) (Decision, error) {
	if cs.Count == 0 {
		return Decision{Allowed: true}, nil
	}
	now := r.now().UnixNano()
	var d Decision
	var err error
	if r.leases != nil && r.leases.on() {
		if r.closed.Load() {
			return Decision{}, errLimiterClosed
		}
		var again bool
		d, again, err = r.allowLeased(&cs, now, true)
		if again {
			d, _, err = r.allowLeased(&cs, now, false)
		}
	} else {
		if d, ok := r.remembered(&cs, nil, now); ok {
			return d, nil
		}
		d, err = r.allowRedis(&cs)
	}
	if err != nil || d.Allowed {
		return d, err
	}
	for i := 0; i < cs.Count; i++ {
		if res := d.Results[i]; res.Known && !res.Allowed && !cs.List[i].Rate.Shadow && res.RetryAfter > 0 {
			r.remember(cs.List[i].Key, denial{until: now + int64(res.RetryAfter), reset: now + int64(res.ResetAfter)})
		}
	}
	return d, nil
}

// remembered answers cs from the in-process memory of denials: the first
// enforced bucket (not held, when held is given) known to refuse until
// later.
func (r *Redis) remembered(cs *Checks, held *[MaxChecks]bool, now int64) (Decision, bool) {
	for i := 0; i < cs.Count; i++ {
		if cs.List[i].Rate.Shadow || held != nil && held[i] {
			continue
		}
		if dn, ok := r.deniedUntil(cs.List[i].Key, now); ok {
			var d Decision
			d.Results[i] = Result{Known: true, RetryAfter: time.Duration(dn.until - now), ResetAfter: time.Duration(dn.reset - now)}
			d.decide(cs)
			return d, true
		}
	}
	return Decision{}, false
}

// allowRedis decides cs in Redis, one token a bucket: no lease.
func (r *Redis) allowRedis(cs *Checks) (Decision, error) {
	if r.cb.State() == gobreaker.StateOpen {
		return Decision{}, errOpen
	}
	want := ones
	d, _, err := r.call(cs, &want)
	return d, err
}

// ones asks one token of every bucket.
var ones = [MaxChecks]int{1, 1, 1, 1, 1, 1, 1, 1}

// errLimiterClosed answers a leased decision after Close.
var errLimiterClosed = fmt.Errorf("%w: %w", ErrUnavailable, errClosed)

// errOpen answers a call the open breaker refuses.
var errOpen = fmt.Errorf("%w: breaker %s: %w", ErrUnavailable, BreakerName, gobreaker.ErrOpenState)

// allowLeased decides cs from the leases of its buckets, asking Redis for
// the buckets without a token (and their next lease) only. A request is
// admitted with a token from each bucket; when a remembered denial, Redis
// refuses or fails, the tokens taken from leases go back to them. (A
// lease's tokens are spent before a denial remembered for its bucket: they
// were charged.) clock is the denial memory's clock. A refusal by Redis of
// a bucket whose lease holds tokens it did not honour (Redis had not
// answered lately) says again is worth it, when first: Redis has answered
// now.
func (r *Redis) allowLeased(cs *Checks, clock int64, first bool) (d Decision, again bool, err error) {
	now := r.clock.Nanotime()
	epoch := r.leases.epoch.Load()
	var tickets [MaxChecks]ticket
	var held [MaxChecks]bool
	var rest Checks
	var want, idx [MaxChecks]int // by rest's index: tokens asked, index in cs
	for i := 0; i < cs.Count; i++ {
		res, t, w, ok := r.leases.take(cs.List[i].Key, now, !first)
		if ok {
			d.Results[i], tickets[i], held[i] = res, t, true
			continue
		}
		idx[rest.Count], want[rest.Count] = i, w
		rest.List[rest.Count] = cs.List[i]
		rest.Count++
	}
	if rest.Count == 0 {
		d.decide(cs)
		return d, false, nil
	}
	giveBack := func() {
		for i := 0; i < cs.Count; i++ {
			if held[i] {
				r.leases.giveBack(cs.List[i].Key, tickets[i], now)
			}
		}
	}
	if dn, ok := r.remembered(cs, &held, clock); ok {
		giveBack()
		return dn, false, nil
	}
	if r.cb.State() == gobreaker.StateOpen {
		giveBack()
		return Decision{}, false, errOpen
	}
	r.closing.RLock() // until the grants are in
	defer r.closing.RUnlock()
	if r.closed.Load() {
		giveBack()
		return Decision{}, false, errLimiterClosed
	}
	rd, grants, err := r.call(&rest, &want)
	if err != nil {
		giveBack()
		return Decision{}, false, err
	}
	for j := 0; j < rest.Count; j++ {
		d.Results[idx[j]] = rd.Results[j]
	}
	d.decide(cs)
	if !d.Allowed {
		giveBack()
		if first {
			for j := 0; j < rest.Count; j++ {
				if res := rd.Results[j]; !res.Allowed && !rest.List[j].Rate.Shadow && r.leases.holds(rest.List[j].Key, now) {
					return d, true, nil
				}
			}
		}
		return d, false, nil
	}
	done := r.clock.Nanotime()
	for j := 0; j < rest.Count; j++ {
		c := &rest.List[j]
		g := grants[j]
		r.leases.grant(c.Key, c.Rate, rd.Results[j], g.n, g.tatUS, epoch, now, done)
		if extra := g.n - 1; extra > 0 {
			// The header counts the lease as this gateway's remaining.
			res := &d.Results[idx[j]]
			res.Remaining = min(res.Remaining+extra, c.Rate.burst())
			res.ResetAfter = max(res.ResetAfter-time.Duration(extra)*(c.Rate.Period/time.Duration(c.Rate.Limit)), 0)
		}
	}
	return d, false, nil
}

// grant is what the script granted one bucket of an allowed call: n
// tokens (the request's own and a lease of the rest; 0 when refused) and
// the bucket's TAT after them, µs since 2017.
type grant struct {
	n     int
	tatUS int64
}

// call makes the one round trip of a decision: through the batcher, which
// reports each round trip to the breaker itself, or alone. want is the
// tokens asked of each bucket.
func (r *Redis) call(cs *Checks, want *[MaxChecks]int) (Decision, [MaxChecks]grant, error) {
	start := time.Now()
	var d Decision
	var g [MaxChecks]grant
	var err error
	if r.batch != nil || r.leases != nil {
		var v []any
		if r.batch != nil {
			v, err = r.batch.do(cs, want)
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
		r.hooks.onBusy()
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

// tripCall is a decision's call through rt, in place of the batcher (a
// simulation's): a round trip that failed drops the leases, as the
// batcher's sender does; a caller that gave up (silent, busy) drops
// nothing itself.
func (r *Redis) tripCall(cs Checks, want [MaxChecks]int) ([]any, error) {
	keys := make([]string, cs.Count)
	args := make([]any, 1+4*cs.Count)
	args[0] = cs.Count
	for i := 0; i < cs.Count; i++ {
		keys[i] = keyPrefix + cs.List[i].Key
		setArgs(args[1+4*i:5+4*i], cs.List[i].Rate, want[i])
	}
	v, err := r.rt(true, r.timeout, [][]string{keys}, [][]any{args})
	switch {
	case err == nil:
		return v[0], nil
	case !errors.Is(err, ErrBusy) && !errors.Is(err, errSilent):
		r.hooks.onFailure(err)
	}
	return nil, err
}

// callAlone makes the call on a connection of its own, bounded by the
// timeout: one round trip, one outcome for the breaker, one token a
// bucket. (Without the batcher a caller is its own sender: a busy node's
// late caller still counts a late round trip, among the window's others.)
func (r *Redis) callAlone(cs *Checks) (Decision, [MaxChecks]grant, error) {
	done, err := r.cb.Allow()
	if err != nil {
		return Decision{}, [MaxChecks]grant{}, fmt.Errorf("breaker %s: %w", BreakerName, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	keys := make([]string, cs.Count)
	args := make([]any, 1+4*cs.Count)
	args[0] = cs.Count
	for i := 0; i < cs.Count; i++ {
		keys[i] = keyPrefix + cs.List[i].Key
		setArgs(args[1+4*i:5+4*i], cs.List[i].Rate, 1)
	}
	cmds, err := runScripts(ctx, r.client, [][]string{keys}, [][]any{args})
	done(err)
	if err != nil && poolWait(err) { // never sent: this gateway's overload
		return Decision{}, [MaxChecks]grant{}, fmt.Errorf("%w: %w", ErrBusy, err)
	}
	if err != nil {
		r.hooks.onFailure(err)
		return Decision{}, [MaxChecks]grant{}, err
	}
	v, err := cmds[0].Slice()
	if err != nil {
		return Decision{}, [MaxChecks]grant{}, err
	}
	return batchDecisionOf(cs, v)
}

// batchDecisionOf reads cs's part of the script's answer: six integers
// per key, times in microseconds.
func batchDecisionOf(cs *Checks, v []any) (Decision, [MaxChecks]grant, error) {
	var d Decision
	var g [MaxChecks]grant
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
		g[i] = grant{n: int(x[4]), tatUS: x[5]}
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
