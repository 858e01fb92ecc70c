package window

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"vendorgate/gateway/limit/redisconn"
	"vendorgate/gateway/policy"
)

// RedisOptions configure a *Redis.
type RedisOptions struct {
	// Client is the Redis client of the marker's checks and the usage
	// view's reads; it must not retry a call (MaxRetries -1).
	Client redis.UniversalClient
	// Conn (required) is the limiter's transport to the same Redis: the
	// charges and refunds go through it (Conn.Eval), in the limiter's
	// pipelined round trips, judged by its rule (docs/limiter-design.md, "When is
	// Redis down") and counted by its breaker, whose hooks are told of
	// its failed round trips.
	Conn *redisconn.Conn
	// Timeout bounds the marker's checks and the usage view's reads (at
	// least a second).
	Timeout time.Duration
	// Down reports that Redis is known down (the limiter's breaker is
	// open): Charge fails at once instead of waiting Timeout. Optional.
	Down func() bool
	// OnFailure is told of a refund that could not be sent (a call past
	// what Conn carries); Conn's failed round trips are told to its hooks.
	// Optional.
	OnFailure func(error)
	// OnDataLost is told when the marker this limiter saw in Redis is
	// gone or replaced: Redis lost its data (quota counters included)
	// since. Optional.
	OnDataLost func()
	// LeaseMax and LeaseTTL lease the quotas whose rows ask for it
	// (policy.Rate.Lease; see lease.go): the most tokens of a bucket one
	// call takes (1: none, every request asks Redis) and how long a lease
	// lives. LeaseMax 0: no leases (and no sweeper to Close).
	LeaseMax int
	LeaseTTL time.Duration
}

// MarkerKey is the marker of one Redis' data: written once, with no TTL
// (never evicted under volatile-* policies), by the first gateway that
// finds it absent, and persisted with the counters. A gateway remembers
// the value it saw; the marker gone or another value later means Redis
// lost its data since (a flush, a restart without its persistence, a
// failover to a replica without it). On a Redis Cluster it lives on the
// master of its own slot.
const MarkerKey = "vg:data-marker"

// keyPrefix begins the window limiter's keys in Redis, apart from the
// GCRA buckets ("rate:" + the bucket's name) of the same row: a row whose
// kind a reload changes, or that replicas of two versions decide each
// their way, never reads the other kind's value.
const keyPrefix = "win:"

// Redis decides windowed checks in Redis: one EVALSHA per request.
type Redis struct {
	o      RedisOptions
	prefix string // this limiter's charge ids begin with it
	seq    atomic.Uint64
	// now is the time passed to the script in milliseconds; nil: Redis's
	// TIME (tests set it).
	now func() int64

	// The marker: checking is set while a check runs (one at a time),
	// known once a check read it; seen (under seenMu) is its value.
	checking     atomic.Bool
	known        atomic.Bool
	seenMu       sync.Mutex
	seen         string
	markerChecks atomic.Uint64 // checks made (tests wait on it)
	// checkFrom is when the charge that asked for the running check began
	// (the limiter's clock, ms): a loss it finds came before.
	checkFrom atomic.Int64

	// Leased quotas (nil without LeaseMax): the leases, the clock they
	// end on, and the sweeper's stop and end.
	leases *quotaLeases
	epoch  time.Time
	stop   chan struct{}
	swept  chan struct{}
	closed sync.Once
}

// NewRedis returns a Redis window limiter.
func NewRedis(o RedisOptions) (*Redis, error) {
	if o.Client == nil {
		return nil, errors.New("window: no Redis client")
	}
	if o.Conn == nil {
		return nil, errors.New("window: no Redis transport")
	}
	if o.Timeout <= 0 {
		return nil, errors.New("window: Timeout must be positive")
	}
	var seed [6]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return nil, fmt.Errorf("window: charge id: %w", err)
	}
	l := &Redis{o: o, prefix: hex.EncodeToString(seed[:]) + "-", epoch: time.Now()}
	if o.LeaseMax > 0 {
		if o.LeaseTTL <= 0 {
			return nil, errors.New("window: LeaseTTL must be positive")
		}
		l.leases = newQuotaLeases(o.LeaseMax, o.LeaseTTL)
		l.stop, l.swept = make(chan struct{}), make(chan struct{})
		go l.sweeper()
	}
	return l, nil
}

// Close gives back what the leases hold and stops the sweeper; nothing
// without leases. Charges after it are not leased.
func (l *Redis) Close() {
	if l.leases == nil {
		return
	}
	l.closed.Do(func() {
		l.leases.closing.Lock() // the leased charges running are done
		l.leases.off.Store(true)
		l.leases.closing.Unlock()
		close(l.stop)
		<-l.swept
	})
}

// Charge decides and charges cs in one call (chargeScript).
func (l *Redis) Charge(cs policy.Checks) (Decision, error) {
	var d Decision
	if cs.Count == 0 {
		d.Allowed = true
		return d, nil
	}
	if l.o.Down != nil && l.o.Down() {
		return d, ErrUnavailable
	}
	if l.leased(&cs) {
		if d, ok, err := l.chargeLeased(cs); ok {
			return d, err
		}
	}
	d.id = l.prefix + strconv.FormatUint(l.seq.Add(1), 36)
	call, keys, args, err := l.call(cs.Count, 2+4*cs.Count)
	if err != nil {
		return d, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	keys, args = keys[:cs.Count], args[:2]
	args[0] = d.id
	args[1] = ""
	if l.now != nil {
		args[1] = strconv.FormatInt(l.now(), 10)
	}
	for i := 0; i < cs.Count; i++ {
		c := &cs.List[i]
		keys[i] = keyPrefix + c.Key
		kind, arg := "s", int64(c.Rate.Period/time.Millisecond)
		if c.Rate.Kind == policy.Quota {
			kind, arg = "q", int64(c.Rate.Calendar.Days)
			if c.Rate.Calendar.Month {
				arg = 0
			}
		}
		shadow := "0"
		if c.Rate.Shadow {
			shadow = "1"
		}
		args = append(args, kind, c.Rate.Limit, arg, shadow)
	}
	// Merged with the charges of concurrent requests: one script run.
	call.Merge, call.NValues = true, 7*cs.Count
	raw, err := l.run(call, chargeScript, keys, args)
	if err != nil {
		if errors.Is(err, redisconn.ErrBusy) {
			return Decision{}, err // this node's overload, not Redis': shed
		}
		return Decision{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	vals, err := integers(raw, 7*cs.Count)
	if err != nil {
		err = fmt.Errorf("window: %w for %d checks", err, cs.Count)
		l.failed(err)
		return Decision{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	absent := false
	for i := 0; i < cs.Count; i++ {
		v := vals[7*i : 7*i+7]
		r := &d.Results[i]
		r.Allowed, r.Used = v[0].(int64) == 1, int(v[1].(int64))
		r.RetryAfter = time.Duration(max(v[2].(int64), 0)) * time.Millisecond
		r.ResetAfter = time.Duration(max(v[3].(int64), 0)) * time.Millisecond
		r.Window = time.Duration(v[4].(int64)) * time.Millisecond
		r.start, r.charged = v[5].(int64), v[6].(int64) != 0
		absent = absent || v[6].(int64) == 2
	}
	d.decide(&cs)
	if (absent || !l.known.Load()) && l.checking.CompareAndSwap(false, true) {
		l.checkFrom.Store(l.clock())
		go l.checkMarker()
	}
	return d, nil
}

// checkMarker reads the marker, writing this limiter's own value where it
// is absent (SET NX GET), off the request's path: after the first charge,
// and after each that found a quota's counter absent (a window's first
// use, or a counter Redis lost). Its value other than the one seen before
// means Redis lost its data: told to OnDataLost once, and the new value is
// the one seen from then on. A failed check is tried again by a later
// charge.
func (l *Redis) checkMarker() {
	defer l.checking.Store(false)
	defer l.markerChecks.Add(1)
	// A value of its own each time it is written: a gateway that wrote
	// the marker and finds it gone writes another, never the one it saw.
	var b [9]byte
	if _, err := rand.Read(b[:]); err != nil {
		l.failed(fmt.Errorf("window: data marker: %w", err))
		return
	}
	mark := hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), max(l.o.Timeout, time.Second))
	defer cancel()
	old, err := l.o.Client.SetArgs(ctx, MarkerKey, mark, redis.SetArgs{Mode: "NX", Get: true}).Result()
	switch {
	case errors.Is(err, redis.Nil):
		old = mark // absent: this value is the marker now
	case err != nil:
		l.failed(fmt.Errorf("window: data marker: %w", err))
		return
	}
	l.seenMu.Lock()
	lost := l.known.Load() && old != l.seen
	l.seen = old
	l.seenMu.Unlock()
	l.known.Store(true)
	if lost {
		l.dropLeases() // counted in counters that are gone
	}
	if lost && l.o.OnDataLost != nil {
		l.o.OnDataLost()
	}
}

// Refund takes back d's charges in one call; a failure leaves them (told
// to OnFailure), never retried.
func (l *Redis) Refund(cs policy.Checks, d Decision) Decision {
	if d.leased {
		now := l.clock()
		for i := 0; i < d.Count; i++ {
			if r := &d.Results[i]; r.charged {
				l.giveOne(cs.List[i].Key, r.start, now)
				r.refunded(cs.List[i].Rate.Limit)
			}
		}
		return d
	}
	var keys []string
	args := []any{d.id}
	for i := 0; i < d.Count; i++ {
		r := &d.Results[i]
		if !r.charged {
			continue
		}
		c := &cs.List[i]
		if c.Rate.Kind == policy.Quota {
			keys = append(keys, keyPrefix+quotaKey(c.Key, r.start))
			args = append(args, "q")
		} else {
			keys = append(keys, keyPrefix+c.Key)
			args = append(args, "s")
		}
		r.refunded(c.Rate.Limit)
	}
	if len(keys) == 0 {
		return d
	}
	call, ks, as, err := l.call(len(keys), len(args))
	if err != nil {
		l.failed(err)
		return d
	}
	copy(ks, keys)
	copy(as, args)
	_, _ = l.run(call, refundScript, ks, as)
	return d
}

// call is where a call's keys and arguments go: a Call's (keys and args
// are its arrays: nothing to copy, nothing to allocate), of the lengths
// asked, with room for them. It refuses more than a Call carries.
func (l *Redis) call(nkeys, nargs int) (*redisconn.Call, []string, []any, error) {
	if nkeys > redisconn.MaxKeys || nargs > redisconn.MaxArgs {
		return nil, nil, nil, fmt.Errorf("window: %d keys and %d arguments, past a call's %d and %d", nkeys, nargs, redisconn.MaxKeys, redisconn.MaxArgs)
	}
	c := l.o.Conn.Call()
	return c, c.Keys[:nkeys], c.Args[:nargs], nil
}

// run runs script for keys and args (call's arrays, from l.call) through
// Conn (Eval) and answers its reply.
func (l *Redis) run(call *redisconn.Call, script *redis.Script, keys []string, args []any) (any, error) {
	call.Script, call.NKeys, call.NArgs = script, len(keys), len(args)
	return l.o.Conn.Eval(call)
}

// integers is a script's reply raw as n integers (each an int64), or
// what it is instead.
func integers(raw any, n int) ([]any, error) {
	vs, ok := raw.([]any)
	switch {
	case !ok:
		return nil, fmt.Errorf("reply %T, want an array", raw)
	case len(vs) != n:
		return nil, fmt.Errorf("%d values, want %d", len(vs), n)
	}
	for i, v := range vs {
		if _, ok := v.(int64); !ok {
			return nil, fmt.Errorf("value %d is %T, want an integer", i, v)
		}
	}
	return vs, nil
}

// Used reads a quota bucket's counter for the window holding now, less
// what this gateway's lease of it holds unspent.
func (l *Redis) Used(key string, r policy.Rate) (int, time.Time, time.Time, error) {
	start, end := r.Calendar.Window(time.Now())
	ctx, cancel := context.WithTimeout(context.Background(), max(l.o.Timeout, time.Second))
	defer cancel()
	n, err := l.o.Client.Get(ctx, keyPrefix+quotaKey(key, start.Unix())).Int()
	if errors.Is(err, redis.Nil) {
		err = nil
	}
	if l.leases != nil {
		// A leased quota's counter counts the slices the gateways hold
		// unspent: this gateway's are not used.
		n = max(n-l.held(key, start.Unix()), 0)
	}
	return n, start, end, err
}

func (l *Redis) failed(err error) {
	if l.o.OnFailure != nil {
		l.o.OnFailure(err)
	}
}
