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

	"vendorgate/gateway/policy"
)

// RedisOptions configure a *Redis.
type RedisOptions struct {
	// Client is the Redis client; it must not retry a call (MaxRetries
	// -1): a retried charge could count twice.
	Client redis.UniversalClient
	// Timeout bounds each call; past it the request is refused
	// (ErrUnavailable).
	Timeout time.Duration
	// Down reports that Redis is known down (the limiter's breaker is
	// open): Charge fails at once instead of waiting Timeout. Optional.
	Down func() bool
	// OnFailure is told of each call that failed (a charge or a
	// refund). Optional.
	OnFailure func(error)
	// OnDataLost is told when the marker this limiter saw in Redis is
	// gone or replaced: Redis lost its data (quota counters included)
	// since. Optional.
	OnDataLost func()
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
}

// NewRedis returns a Redis window limiter.
func NewRedis(o RedisOptions) (*Redis, error) {
	if o.Client == nil {
		return nil, errors.New("window: no Redis client")
	}
	if o.Timeout <= 0 {
		return nil, errors.New("window: Timeout must be positive")
	}
	var seed [6]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return nil, fmt.Errorf("window: charge id: %w", err)
	}
	return &Redis{o: o, prefix: hex.EncodeToString(seed[:]) + "-"}, nil
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
	d.id = l.prefix + strconv.FormatUint(l.seq.Add(1), 36)
	keys := make([]string, cs.Count)
	args := make([]any, 2, 2+4*cs.Count)
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
	ctx, cancel := context.WithTimeout(context.Background(), l.o.Timeout)
	defer cancel()
	vals, err := chargeScript.Run(ctx, l.o.Client, keys, args...).Int64Slice()
	if err == nil && len(vals) != 7*cs.Count {
		err = fmt.Errorf("window: %d values for %d checks", len(vals), cs.Count)
	}
	if err != nil {
		l.failed(err)
		return Decision{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	absent := false
	for i := 0; i < cs.Count; i++ {
		v := vals[7*i : 7*i+7]
		r := &d.Results[i]
		r.Allowed, r.Used = v[0] == 1, int(v[1])
		r.RetryAfter = time.Duration(max(v[2], 0)) * time.Millisecond
		r.ResetAfter = time.Duration(max(v[3], 0)) * time.Millisecond
		r.Window = time.Duration(v[4]) * time.Millisecond
		r.start, r.charged = v[5], v[6] != 0
		absent = absent || v[6] == 2
	}
	d.decide(&cs)
	if (absent || !l.known.Load()) && l.checking.CompareAndSwap(false, true) {
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
	if lost && l.o.OnDataLost != nil {
		l.o.OnDataLost()
	}
}

// Refund takes back d's charges in one call; a failure leaves them (told
// to OnFailure), never retried.
func (l *Redis) Refund(cs policy.Checks, d Decision) Decision {
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
	ctx, cancel := context.WithTimeout(context.Background(), l.o.Timeout)
	defer cancel()
	if err := refundScript.Run(ctx, l.o.Client, keys, args...).Err(); err != nil && !errors.Is(err, redis.Nil) {
		l.failed(err)
	}
	return d
}

// Used reads a quota bucket's counter for the window holding now.
func (l *Redis) Used(key string, r policy.Rate) (int, time.Time, time.Time, error) {
	start, end := r.Calendar.Window(time.Now())
	ctx, cancel := context.WithTimeout(context.Background(), max(l.o.Timeout, time.Second))
	defer cancel()
	n, err := l.o.Client.Get(ctx, keyPrefix+quotaKey(key, start.Unix())).Int()
	if errors.Is(err, redis.Nil) {
		err = nil
	}
	return n, start, end, err
}

func (l *Redis) failed(err error) {
	if l.o.OnFailure != nil {
		l.o.OnFailure(err)
	}
}
