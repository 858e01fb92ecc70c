package limit

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"vendorgate/gateway/breaker"
)

// keyPrefix is redis_rate's key prefix; the multi-key script uses it too so
// that a bucket is the same Redis key whichever path checked it.
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
}

// BreakerName is the name of the limiter's breaker in metrics.
const BreakerName = "redis"

// Redis is the shared limiter: GCRA in Redis through redis_rate (one limit)
// or one script applying the same GCRA to every limit of a request, one
// round trip either way. A denial is remembered in process until its
// RetryAfter, so a vendor known to be over its limit costs no Redis call.
type Redis struct {
	rl      *redis_rate.Limiter
	client  redis.UniversalClient
	timeout time.Duration
	cb      *gobreaker.TwoStepCircuitBreaker[Decision]
	hooks   *hooks
	observe func(time.Duration, error)
	now     func() time.Time
	seed    maphash.Seed
	denied  [localShards]deniedShard
	batch   *batcher // nil without Pipeline
}

type deniedShard struct {
	mu sync.RWMutex
	m  map[string]denial
}

type denial struct{ until, reset int64 } // unix ns

// NewRedis returns a Redis limiter behind its own breaker.
func NewRedis(o RedisOptions) (*Redis, error) {
	if o.Client == nil {
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
		rl:      redis_rate.NewLimiter(o.Client),
		client:  o.Client,
		timeout: o.Timeout,
		hooks:   h,
		observe: o.ObserveCall,
		now:     o.Now,
		seed:    maphash.MakeSeed(),
	}
	r.cb = breaker.NewTwoStep[Decision](breaker.Settings{Name: BreakerName, Failures: o.BreakerFailures,
		Window: o.BreakerWindow, FailureRatio: o.BreakerFailureRatio, OpenFor: o.BreakerOpenFor,
		OnTrip:        func(c gobreaker.Counts) { h.counts = c },
		Excluded:      replyLate, // the gateway read late: not Redis' failure
		OnStateChange: h.onStateChange(o.OnStateChange, o.BreakerWindow.String())})
	for i := range r.denied {
		r.denied[i].m = make(map[string]denial)
	}
	if o.Pipeline {
		if o.PipelineMax <= 0 {
			o.PipelineMax = 128
		}
		if o.PipelineSenders <= 0 {
			o.PipelineSenders = 2
		}
		r.batch = newBatcher(o.Client, &o, r.cb, h)
	}
	return r, nil
}

// Close stops the pipelining goroutine (when Pipeline is on); calls made
// afterwards fail with ErrUnavailable. It does not close the client.
func (r *Redis) Close() {
	if r.batch != nil {
		r.batch.close()
	}
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

// Grace is how much longer than Timeout a silent Redis is waited for now
// (at most BusyTimeout in all) before a request fails closed: while the
// node's Lateness is past a tenth of Timeout, a multiple of the excess,
// and at least the longest Redis took to answer over the same second (see
// lateness). Zero on a quiet node, and without Pipeline.
func (r *Redis) Grace() time.Duration {
	if r.batch == nil {
		return 0
	}
	return r.batch.late.Grace()
}

// State is the breaker's state; reading it also moves an open breaker whose
// time is up to half-open.
func (r *Redis) State() gobreaker.State { return r.cb.State() }

// Allow checks cs in Redis. Redis down, silent past Timeout, or the
// breaker open: ErrUnavailable; the node too busy to get an answer within
// BusyTimeout while Redis answers: ErrBusy; never an allowed Decision.
func (r *Redis) Allow(cs Checks) (Decision, error) {
	if cs.Count == 0 {
		return Decision{Allowed: true}, nil
	}
	now := r.now().UnixNano()
	for i := 0; i < cs.Count; i++ {
		if cs.List[i].Rate.Shadow {
			continue
		}
		if dn, ok := r.deniedUntil(cs.List[i].Key, now); ok {
			var d Decision
			d.Results[i] = Result{Known: true, RetryAfter: time.Duration(dn.until - now), ResetAfter: time.Duration(dn.reset - now)}
			d.decide(&cs)
			return d, nil
		}
	}
	if r.cb.State() == gobreaker.StateOpen {
		return Decision{}, fmt.Errorf("%w: breaker %s: %w", ErrUnavailable, BreakerName, gobreaker.ErrOpenState)
	}
	d, err := r.call(&cs)
	if err != nil {
		return Decision{}, err
	}
	if !d.Allowed {
		for i := 0; i < cs.Count; i++ {
			if res := d.Results[i]; !res.Allowed && !cs.List[i].Rate.Shadow && res.RetryAfter > 0 {
				r.remember(cs.List[i].Key, denial{until: now + int64(res.RetryAfter), reset: now + int64(res.ResetAfter)})
			}
		}
	}
	return d, nil
}

// call makes the one round trip of a decision: through the batcher, which
// reports each round trip to the breaker itself, or alone.
func (r *Redis) call(cs *Checks) (Decision, error) {
	start := time.Now()
	var d Decision
	var err error
	if r.batch != nil {
		var v []any
		if v, err = r.batch.do(cs); err == nil {
			d, err = batchDecisionOf(cs, v)
		}
	} else {
		d, err = r.callAlone(cs)
	}
	r.observe(time.Since(start), err)
	switch {
	case err == nil:
	case errors.Is(err, ErrBusy):
		r.hooks.onBusy()
		return Decision{}, err
	default:
		return Decision{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	d.decide(cs)
	return d, nil
}

// callAlone makes the call on a connection of its own, bounded by the
// timeout: one round trip, one outcome for the breaker. (Without the
// batcher a caller is its own sender: a busy node's late caller still
// counts a late round trip, among the window's others.)
func (r *Redis) callAlone(cs *Checks) (Decision, error) {
	done, err := r.cb.Allow()
	if err != nil {
		return Decision{}, fmt.Errorf("breaker %s: %w", BreakerName, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	var d Decision
	if cs.Count == 1 {
		d, err = r.allowOne(ctx, cs)
	} else {
		d, err = r.allowAll(ctx, cs)
	}
	done(err)
	if err != nil {
		r.hooks.onFailure(err)
	}
	return d, err
}

// allowOne is redis_rate's AllowN for a request under one limit.
func (r *Redis) allowOne(ctx context.Context, cs *Checks) (Decision, error) {
	c := cs.List[0]
	res, err := r.rl.AllowN(ctx, c.Key, redis_rate.Limit{Rate: c.Rate.Limit, Burst: c.Rate.burst(), Period: c.Rate.Period}, 1)
	if err != nil {
		return Decision{}, err
	}
	var d Decision
	d.Results[0] = Result{Known: true, Allowed: res.Allowed > 0, ResetAfter: res.ResetAfter}
	if res.Allowed > 0 {
		// redis_rate's Remaining truncates a float and under-reports by
		// one; ResetAfter gives the exact figure.
		d.Results[0].Remaining = remaining(c.Rate, res.ResetAfter)
	} else {
		d.Results[0].RetryAfter = res.RetryAfter
	}
	return d, nil
}

// remaining is how many requests fit when the bucket is whole again after
// resetAfter.
func remaining(rt Rate, resetAfter time.Duration) int {
	emission := float64(rt.Period) / float64(rt.Limit)
	n := (emission*float64(rt.burst()) - float64(resetAfter)) / emission
	if n < 0 {
		return 0
	}
	return int(math.Floor(n + 1e-6))
}

// allowAll runs the multi-limit script.
func (r *Redis) allowAll(ctx context.Context, cs *Checks) (Decision, error) {
	keys := make([]string, cs.Count)
	args := make([]any, 0, 4*cs.Count)
	for i := 0; i < cs.Count; i++ {
		c := cs.List[i]
		keys[i] = keyPrefix + c.Key
		shadow := "0"
		if c.Rate.Shadow {
			shadow = "1"
		}
		args = append(args, c.Rate.burst(), c.Rate.Limit, c.Rate.Period.Seconds(), shadow)
	}
	v, err := allowAll.Run(ctx, r.client, keys, args...).Slice()
	if err != nil {
		return Decision{}, err
	}
	return decisionOf(cs, v)
}

// decisionOf reads the multi-limit script's answer for cs.
func decisionOf(cs *Checks, v []any) (Decision, error) {
	if len(v) != 4*cs.Count {
		return Decision{}, fmt.Errorf("limit script answered %d values for %d keys", len(v), cs.Count)
	}
	var d Decision
	for i := 0; i < cs.Count; i++ {
		allowed, _ := v[4*i].(int64)
		rem, _ := v[4*i+1].(int64)
		retry, err1 := seconds(v[4*i+2])
		reset, err2 := seconds(v[4*i+3])
		if err := errors.Join(err1, err2); err != nil {
			return Decision{}, err
		}
		d.Results[i] = Result{Known: true, Allowed: allowed == 1, Remaining: int(rem), ResetAfter: reset}
		if allowed != 1 {
			d.Results[i].RetryAfter = retry
		}
	}
	return d, nil
}

// batchDecisionOf reads cs's part of the batch script's answer: four
// integers per key, times in microseconds.
func batchDecisionOf(cs *Checks, v []any) (Decision, error) {
	if len(v) != 4*cs.Count {
		return Decision{}, fmt.Errorf("limit script answered %d values for %d keys", len(v), cs.Count)
	}
	var d Decision
	for i := 0; i < cs.Count; i++ {
		allowed, ok1 := v[4*i].(int64)
		rem, ok2 := v[4*i+1].(int64)
		retry, ok3 := v[4*i+2].(int64)
		reset, ok4 := v[4*i+3].(int64)
		if !ok1 || !ok2 || !ok3 || !ok4 {
			return Decision{}, fmt.Errorf("limit script answered %T %T %T %T, want integers", v[4*i], v[4*i+1], v[4*i+2], v[4*i+3])
		}
		d.Results[i] = Result{Known: true, Allowed: allowed == 1, Remaining: int(rem), ResetAfter: time.Duration(reset) * time.Microsecond}
		if allowed != 1 {
			d.Results[i].RetryAfter = time.Duration(retry) * time.Microsecond
		}
	}
	return d, nil
}

func seconds(v any) (time.Duration, error) {
	s, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("limit script: %T is not a string", v)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("limit script: %w", err)
	}
	if f < 0 {
		return 0, nil
	}
	return time.Duration(f * float64(time.Second)), nil
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
