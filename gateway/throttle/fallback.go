package throttle

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Fallback says why a Redis throttle counted a failure in process.
type Fallback string

// The reasons a failure is counted in process.
const (
	// FallbackBusy: every connection of the throttle's share was in use.
	FallbackBusy Fallback = "busy"
	// FallbackError: the call to Redis failed (a timeout, a refused
	// connection, an error reply).
	FallbackError Fallback = "error"
	// FallbackDown: the limiter finds Redis down (its breaker is open).
	FallbackDown Fallback = "redis_down"
)

// Fallbacks lists the reasons, for metrics present at zero.
var Fallbacks = []Fallback{FallbackBusy, FallbackError, FallbackDown}

// RedisOptions configures a throttle whose counts live in Redis. Client,
// Timeout, Conns, Hold and MaxTracked are required (config holds the
// settings' defaults): NewRedis refuses a zero.
type RedisOptions struct {
	// Client is a plain, Sentinel or Cluster client of the throttle's own
	// (its pool apart from the limiter's), with at least Conns connections
	// and no retries (a retried INCR counts a failure twice).
	Client redis.UniversalClient
	// Timeout bounds one call (the limiter's redis.timeout).
	Timeout time.Duration
	// Conns bounds the calls in flight at once: a failure that finds them
	// all in use is counted in process at once, never queued for a
	// connection.
	Conns int
	// Hold is how long the throttle counts in process, without asking
	// Redis, after a call failed or found every connection in use; the
	// first call after it asks Redis again.
	Hold time.Duration
	// Down, when set, reports whether Redis is known to be down (the
	// limiter's breaker is open): the failure is counted in process
	// without a call.
	Down func() bool
	// MaxTracked bounds the in-process counts (LocalOptions.MaxTracked).
	MaxTracked int
	// OnFallback is told of every failure counted in process, with why.
	OnFallback func(Fallback)
	// OnDegraded is told once when the throttle begins counting in
	// process: why, and the error of the failed call (nil when busy or
	// down).
	OnDegraded func(why Fallback, err error)
	// OnRestored is told once when it counts in Redis again (at the first
	// failure counted in Redis a whole Hold after the last fallback): how
	// long it had counted in process and how many failures.
	OnRestored func(degradedFor time.Duration, counted uint64)
	// Now is the throttle's clock (its memory of addresses over their
	// threshold, its in-process counts, Hold); time.Now when nil.
	Now func() time.Time
}

// NewRedis returns a throttle whose counts live in Redis, shared by every
// replica, and in process while Redis is out of its reach. It refuses
// options it cannot use.
func NewRedis(o RedisOptions) (*Throttle, error) {
	switch {
	case o.Client == nil:
		return nil, errors.New("throttle: redis client required")
	case o.Timeout <= 0:
		return nil, fmt.Errorf("throttle: timeout %s must be positive", o.Timeout)
	case o.Conns <= 0:
		return nil, fmt.Errorf("throttle: conns %d must be positive", o.Conns)
	case o.Hold <= 0:
		return nil, fmt.Errorf("throttle: hold %s must be positive", o.Hold)
	case o.MaxTracked <= 0:
		return nil, fmt.Errorf("throttle: max tracked %d must be positive", o.MaxTracked)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &sharedCounter{
		redis: &redisCounter{client: o.Client, timeout: o.Timeout},
		local: newLocalCounter(LocalOptions{Now: o.Now, MaxTracked: o.MaxTracked}),
		slots: make(chan struct{}, o.Conns),
		hold:  o.Hold, now: o.Now, down: o.Down,
		onFallback: o.OnFallback, onDegraded: o.OnDegraded, onRestored: o.OnRestored,
	}
	s.localUntil.Store(-1 << 63)
	return newThrottle(s, o.Now), nil
}

// sharedCounter counts in Redis through a bounded share of connections,
// and in process while Redis cannot count: when every connection of the
// share is in use (a flood of failed keys: no call waits for one, so the
// throttle never holds a request, nor Redis, longer than its share), when
// a call failed, and while the limiter finds Redis down. After a fallback
// it keeps counting in process for hold, without asking Redis, then asks
// again. Its state changes are told once each (degraded, restored), the
// failures counted in process one by one to onFallback (a metric).
//
// Counts taken in process are this replica's alone: while it falls back,
// a client's failures spread over several replicas are counted apart, and
// its Redis count resumes where it was. An address found over its
// threshold in either stays answered 429 until its window ends
// (Throttle.over).
type sharedCounter struct {
	redis *redisCounter
	local *localCounter
	slots chan struct{} // one token per call in flight
	hold  time.Duration
	now   func() time.Time
	down  func() bool

	onFallback func(Fallback)
	onDegraded func(Fallback, error)
	onRestored func(time.Duration, uint64)

	// localUntil (unix ns) is when the hold after the last fallback ends;
	// why is that fallback's reason, for the failures counted meanwhile.
	localUntil atomic.Int64
	why        atomic.Pointer[Fallback]
	// degraded is set from the first fallback until the restore.
	degraded atomic.Bool
	counted  atomic.Uint64 // failures counted in process, ever

	mu           sync.Mutex // the transitions
	since        time.Time  // when degraded began
	countedSince uint64     // counted then
}

func (s *sharedCounter) incr(keys []string, win time.Duration) ([]count, Fallback) {
	now := s.now()
	if s.down != nil && s.down() {
		return s.fallBack(keys, win, now, FallbackDown, nil)
	}
	if now.UnixNano() < s.localUntil.Load() {
		why := FallbackBusy
		if p := s.why.Load(); p != nil {
			why = *p
		}
		return s.inProcess(keys, win, now, why), why
	}
	select {
	case s.slots <- struct{}{}:
	default:
		return s.fallBack(keys, win, now, FallbackBusy, nil)
	}
	counts, err := s.redis.incr(keys, win)
	<-s.slots
	if err != nil {
		return s.fallBack(keys, win, s.now(), FallbackError, err)
	}
	if s.degraded.Load() {
		s.restore(s.now())
	}
	return counts, ""
}

// fallBack starts (or extends) a hold and counts keys in process.
func (s *sharedCounter) fallBack(keys []string, win time.Duration, now time.Time, why Fallback, err error) ([]count, Fallback) {
	s.mu.Lock()
	s.why.Store(&why)
	s.localUntil.Store(now.Add(s.hold).UnixNano())
	if !s.degraded.Load() {
		s.degraded.Store(true)
		s.since, s.countedSince = now, s.counted.Load()
		if s.onDegraded != nil {
			s.onDegraded(why, err)
		}
	}
	s.mu.Unlock()
	return s.inProcess(keys, win, now, why), why
}

// inProcess counts keys in process.
func (s *sharedCounter) inProcess(keys []string, win time.Duration, now time.Time, why Fallback) []count {
	s.counted.Add(1)
	if s.onFallback != nil {
		s.onFallback(why)
	}
	return s.local.count(keys, win, now)
}

// restore ends the degraded state once Redis has counted a whole hold
// after the last hold ended: a flood that keeps the share busy keeps it
// degraded, told once.
func (s *sharedCounter) restore(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.degraded.Load() || now.UnixNano() < s.localUntil.Load()+int64(s.hold) {
		return
	}
	s.degraded.Store(false)
	if s.onRestored != nil {
		s.onRestored(now.Sub(s.since), s.counted.Load()-s.countedSince)
	}
}
