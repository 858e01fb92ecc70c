package limit

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"vendorgate/gateway/limit/redisconn"
)

// keyPrefix is redis_rate's key prefix: the script keeps redis_rate's
// buckets, so that gateways of an older release (which called redis_rate)
// share them during a rolling upgrade.
const keyPrefix = "rate:"

// RedisOptions configures a Redis limiter. Each setting's default is
// config's (the redis.* setting of the same name; the breaker's ratio is
// redis.breaker_failure_percent / 100): NewRedis fills in none, and refuses
// a value it cannot use. The hooks are optional.
type RedisOptions struct {
	// Client is a plain, Sentinel or Cluster client. It should have
	// MaxRetries -1 (a retried EVALSHA can charge a bucket twice) and
	// DialerRetries 1 (go-redis' default of 5, 100 ms apart, spends a
	// heartbeat's whole deadline dialling a Redis that refuses: it fails
	// as a timeout, late, instead of at once).
	Client redis.UniversalClient
	// Timeout is how long a request waits on a silent Redis: past it, with
	// no answer from Redis to anyone meanwhile, the request fails closed
	// instead of queueing behind a sick Redis.
	Timeout time.Duration
	// WireTimeout bounds one pipelined round trip on the wire (its socket
	// deadline, set when the batch is sent); past it the round trip is one
	// failure for the breaker. At least Timeout: a sender that got its
	// core late must find the reply still readable, not an i/o timeout
	// with the reply already in the socket buffer. The client should have
	// ReadTimeout and WriteTimeout at least this long.
	WireTimeout time.Duration
	// BusyTimeout is how long in all a request may wait while Redis is
	// visibly answering (round trips answered meanwhile) though its own
	// Timeout passed: the node is busy, not Redis. Past it the request
	// fails with ErrBusy. At least Timeout.
	BusyTimeout time.Duration
	// TickSlack is how late the node's 5ms scheduling probe may wake and
	// still count as on time: only a node on time through the last second
	// calls a silent Redis down at Timeout; a late one leaves the verdict
	// to WireTimeout (see lateness and batcher.silent). Required with
	// Pipeline; config's default is 2ms.
	TickSlack time.Duration
	// BreakerOpenFor is how long the breaker stays open before it lets one
	// probe through.
	BreakerOpenFor time.Duration
	// BreakerFailures is how many failed round trips (a batch is one)
	// within BreakerWindow open the breaker: in a row, or when they are
	// also at least BreakerFailureRatio of the round trips that finished in
	// it.
	BreakerFailures int
	// BreakerWindow is the rolling window of the failure ratio. (Failures
	// in a row open the breaker whenever they ended.)
	BreakerWindow time.Duration
	// BreakerFailureRatio is the share of failed round trips within the
	// window that opens the breaker, above 0 and at most 1: one late round
	// trip among many answered ones opens nothing; a dead Redis fails them
	// all.
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
	// Clock is the limiter's monotonic time and timers (a lease's life,
	// the lease loop's beat, the transport's waits and on-time probe); the
	// system's when nil.
	Clock Clock
	// Pipeline sends the calls of concurrent requests together, as one
	// pipelined write of script calls answered in one read (see
	// redisconn). Off: one round trip per request on its own pooled
	// connection, and no leases.
	Pipeline bool
	// PipelineMax bounds the calls in one pipeline (with Pipeline).
	PipelineMax int
	// PipelineSenders is how many pipelines may be in flight at once (with
	// Pipeline).
	PipelineSenders int
	// LeaseMax is the most tokens one call takes of a bucket: the request's
	// own and a lease of the rest, decided here without asking Redis (see
	// leases). 1 is no lease: every request asks Redis, strictly exact.
	// At least 1 with Pipeline (leases need it); unused without.
	LeaseMax int
	// LeaseTTL is how long a lease lives, from its call: what is left then
	// goes back. Admissions stay within what GCRA allows with a burst of
	// burst + ceil(rate × LeaseTTL). Positive with Pipeline; unused
	// without.
	LeaseTTL time.Duration
	// Leases are told what happens to leased tokens.
	Leases LeaseHooks
	// OnCharged is told how many buckets each allowed call charged in
	// Redis (the script's own count).
	OnCharged func(n int)
}

// The transport's names the gateway uses: the breaker's name in metrics,
// the shed answer of a busy node, how a failed round trip is classified.
const BreakerName = redisconn.BreakerName

// ErrBusy means this gateway could not get a request's limit call answered
// within RedisOptions.BusyTimeout although Redis was answering meanwhile,
// or could not get a connection of its own pool in time (see
// redisconn.ErrBusy). The caller refuses the request as an overload (503
// request_failed), never as a limiter outage, and never lets it through.
var ErrBusy = redisconn.ErrBusy

// FailureKind says how a round trip to Redis failed.
type FailureKind = redisconn.FailureKind

// The kinds of failed round trips (see redisconn).
const (
	FailTimeout    = redisconn.FailTimeout
	FailConnection = redisconn.FailConnection
	FailScript     = redisconn.FailScript
)

// KindOf classifies the error of a failed round trip.
func KindOf(err error) FailureKind { return redisconn.KindOf(err) }

// Redis is the shared limiter: GCRA in Redis by one script of its own
// (lua.go), which applies redis_rate's arithmetic to redis_rate's stored
// value, for every limit of a request in one round trip (redis_rate itself
// is no longer called). A denial is remembered in process until its
// RetryAfter, so a vendor known to be over its limit costs no Redis call.
type Redis struct {
	timeout   time.Duration
	wire      time.Duration
	health    *redisconn.Health
	conn      *redisconn.Conn // nil with a simulation's roundTrip
	observe   func(time.Duration, error)
	now       func() time.Time
	seed      maphash.Seed
	denied    [localShards]deniedShard
	closeOnce sync.Once
	leases    *leases // nil without Pipeline
	refunds   *refundCap
	// refundSeq counts the refund runs sent (see ownRefunds); own is what
	// they took off each bucket lately.
	refundSeq atomic.Uint64
	own       ownRefunds
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
	// rt, when set, replaces conn (see roundTrip).
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

// Clock is a clock for the limiter and its transport: the lease logic's
// (see clock) with the transport's timers.
type Clock interface {
	redisconn.Clock
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// systemClock is the system's monotonic time since its epoch, and its
// timers (the transport's too: see redisconn.Clock).
type systemClock struct{ redisconn.SystemClock }

func (systemClock) AfterFunc(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }

// roundTrip is one round trip to Redis: the script run once per group of
// keys and args (one group per hash slot), or, with no group, a ping of
// every node the buckets live on; it returns each group's reply. A
// decision's call (judged) is waited for as a pipelined call waits: failed
// only when Redis was silent past Timeout; refunds wait up to deadline,
// and so does a simulation's ping (the limiter's own is judged by the
// transport's rule, see Conn.Heartbeat). The limiter's own is its Conn's
// pipeline (decisions) and its Conn's client (the rest); a simulation
// brings its own, to decide delay, order and loss.
type roundTrip func(judged bool, deadline time.Duration, keys [][]string, args [][]any) ([][]any, error)

// NewRedis returns a Redis limiter behind its own breaker.
func NewRedis(o RedisOptions) (*Redis, error) {
	if o.Clock == nil {
		o.Clock = systemClock{redisconn.SystemClock{Epoch: time.Now()}}
	}
	return newRedis(o, o.Clock, nil)
}

// newRedis is NewRedis on clock; with rt (a simulation) the limiter has
// no Conn, starts no goroutine of its own and needs no client.
func newRedis(o RedisOptions, clk clock, rt roundTrip) (*Redis, error) {
	if o.Client == nil && rt == nil {
		return nil, errors.New("limit: redis client required")
	}
	if err := redisconn.CheckTimeouts(o.Timeout, o.WireTimeout, o.BusyTimeout); err != nil {
		return nil, fmt.Errorf("limit: %w", err)
	}
	if o.Pipeline {
		if err := checkLeases(o.LeaseMax, o.LeaseTTL); err != nil {
			return nil, err
		}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.ObserveCall == nil {
		o.ObserveCall = func(time.Duration, error) {}
	}
	r := &Redis{
		timeout: o.Timeout,
		wire:    o.WireTimeout,
		observe: o.ObserveCall,
		now:     o.Now,
		seed:    maphash.MakeSeed(),
		charged: o.OnCharged,
		clock:   clk,
		rt:      rt,
		refunds: newRefundCap(o.Now),
	}
	for i := range r.denied {
		r.denied[i].m = make(map[string]denial)
	}
	if o.Pipeline {
		_, r.cluster = o.Client.(*redis.ClusterClient)
		r.pinged.Store(math.MinInt64 / 2)
		r.leases = newLeases(o.LeaseMax, o.LeaseTTL, func() bool {
			now := r.clock.Nanotime()
			return now-r.heard.Load() <= int64(o.Timeout) && (!r.cluster || now-r.pinged.Load() <= int64(o.Timeout))
		}, o.Leases)
	}
	hopts := redisconn.HealthOptions{BreakerOpenFor: o.BreakerOpenFor, BreakerFailures: o.BreakerFailures,
		BreakerWindow: o.BreakerWindow, BreakerFailureRatio: o.BreakerFailureRatio,
		OnStateChange: o.OnStateChange, OnBreakerOpen: o.OnBreakerOpen, OnFailure: o.OnFailure,
		OnUnsent: o.OnUnsent, OnBusy: o.OnBusy}
	if r.leases != nil {
		hopts.OnLost = r.leases.drop // Redis failed: the leases go with it
	}
	var err error
	if r.health, err = redisconn.NewHealth(hopts); err != nil {
		return nil, fmt.Errorf("limit: %w", err)
	}
	if rt == nil {
		cc, ok := clk.(redisconn.Clock)
		if !ok {
			return nil, errors.New("limit: the transport needs a clock with timers")
		}
		r.conn, err = redisconn.New(redisconn.Options{Client: o.Client, Script: gcraScript, Timeout: o.Timeout,
			WireTimeout: o.WireTimeout, BusyTimeout: o.BusyTimeout, Pipeline: o.Pipeline,
			PipelineMax: o.PipelineMax, PipelineSenders: o.PipelineSenders, TickSlack: o.TickSlack}, r.health, cc)
		if err != nil {
			return nil, fmt.Errorf("limit: %w", err)
		}
		r.rt = r.clientTrip // pings and refunds (decisions go through conn)
	}
	if o.Pipeline {
		if rt == nil {
			r.heard = r.conn.Heard()
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
// lease held back to Redis: they were taken under the old limits. It
// refuses (and changes nothing) a LeaseMax below 1 or a LeaseTTL not
// positive.
func (r *Redis) SetLeases(max int, ttl time.Duration) error {
	if r.leases == nil {
		return nil
	}
	if err := checkLeases(max, ttl); err != nil {
		return err
	}
	r.leases.set(max, ttl)
	r.returnAll.Store(true)
	return nil
}

// checkLeases refuses lease settings the leases cannot use.
func checkLeases(max int, ttl time.Duration) error {
	switch {
	case max < 1:
		return fmt.Errorf("limit: lease max %d must be at least 1 (1: no leases)", max)
	case ttl <= 0:
		return fmt.Errorf("limit: lease ttl %s must be positive", ttl)
	}
	return nil
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
		if r.conn != nil {
			r.conn.Close()
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
		r.heartbeat(now)
	}
	all := r.returnAll.Swap(false)
	if all || now-r.lastSweep >= r.leases.ttl.Load()/4 {
		r.lastSweep = now
		r.sendRefunds(r.leases.sweep(now, all))
		r.own.prune(now) // also when nothing was sent
	}
}

// heartbeat pings every node the buckets live on, by the rule the
// requests keep (Conn.Heartbeat; docs/limiter-design.md, "When is Redis down").
// A ping the transport does not call Redis' failure (ReplyLate: a reply
// read late, a request written late, no pooled connection while Redis was
// not judged silent, no verdict within the busy timeout) is no verdict:
// the next beat asks again. (Whether
// Redis answered in time is what heard and pinged tell the leases.) A
// failed ping is a Redis failure: counted, and every lease dropped with
// it.
func (r *Redis) heartbeat(now int64) {
	switch _, err := r.rt(false, r.timeout, nil, nil); {
	case err == nil:
		r.pinged.Store(now)
	case redisconn.ReplyLate(err):
	default:
		r.health.Failed(err)
	}
}

// clientTrip is the limiter's roundTrip over its Conn's client, for pings
// of every node the buckets live on and refunds (decisions go through the
// pipeline).
func (r *Redis) clientTrip(_ bool, deadline time.Duration, keys [][]string, args [][]any) ([][]any, error) {
	if len(keys) == 0 {
		return nil, r.conn.Heartbeat() // the transport's rule, not deadline
	}
	return r.conn.Run(deadline, keys, args)
}

// refundsPerScript bounds the keys of one refund script: the script reads
// its keys with one MGET of them all, and Lua unpacks at most about 8,000
// values at once.
const refundsPerScript = 1000

// sendRefunds sends unused lease tokens back in one script run (one per
// hash slot with a Cluster, and one per refundsPerScript keys), the runs
// pipelined in round trips of at most refundsPerScript keys in all, each
// under the wire deadline: the deadline is sized for one call, and
// thousands of buckets' runs pipelined under one were cut off on a busy
// node, their tokens lost. After a round trip fails, the runs left go in
// one more round trip (Redis failing, each would wait its deadline in
// turn: the lease loop waits two deadlines at most), never left unsent:
// with a Cluster they may be another node's. A refund that fails is lost:
// the tokens come back as the bucket refills. Each refund is reckoned
// below what this gateway's earlier refunds of its bucket took off under
// its charge, and what each run's refunds took off is kept for the
// refunds after them (ownRefunds).
func (r *Redis) sendRefunds(refs []refund) {
	if len(refs) == 0 || r.health.Open() {
		return
	}
	r.own.prune(r.clock.Nanotime())
	seq := r.refundSeq.Add(1) // before the runs are sent
	var keys [][]string
	var args [][]any
	var sent [][]int              // each run's refunds, by index in refs
	index := make(map[uint16]int) // a slot's script still filling
	for j := range refs {
		f := &refs[j]
		var s uint16
		if r.cluster {
			s = redisconn.Slot(f.key)
		}
		i, ok := index[s]
		if !ok || len(keys[i]) == refundsPerScript {
			i = len(keys)
			index[s] = i
			keys, args, sent = append(keys, nil), append(args, nil), append(sent, nil)
		}
		keys[i] = append(keys[i], f.key)
		args[i] = append(args[i], 0, f.emission, f.unused, f.tatGrantUS, f.after, r.own.adjust(f))
		sent[i] = append(sent[i], j)
	}
	for from := 0; from < len(keys); {
		to, n := from+1, len(keys[from])
		for to < len(keys) && n+len(keys[to]) <= refundsPerScript {
			n += len(keys[to])
			to++
		}
		v, err := r.rt(false, r.wire, keys[from:to], args[from:to])
		if err != nil {
			if to < len(keys) {
				v, err = r.rt(false, r.wire, keys[to:], args[to:])
				r.recordRefunds(refs, sent[to:], v, err, seq)
			}
			return
		}
		r.recordRefunds(refs, sent[from:to], v, nil, seq)
		from = to
	}
}

// recordRefunds keeps what each refund of the runs answered v took off
// (two integers a refund: taken off, and left ahead), for the refunds
// after them; a failed round trip, or an answer not of this script, tells
// nothing.
func (r *Redis) recordRefunds(refs []refund, sent [][]int, v [][]any, err error, seq uint64) {
	if err != nil || len(v) != len(sent) {
		return
	}
	now := r.clock.Nanotime()
	for i := range sent {
		if len(v[i]) != 2*len(sent[i]) {
			continue // not the answer of this script: nothing known
		}
		for n, j := range sent[i] {
			back, _ := v[i][2*n].(int64)
			left, _ := v[i][2*n+1].(int64)
			r.own.record(&refs[j], seq, back, left, now)
		}
	}
}

// Transport is the limiter's way to Redis (nil in a simulation): the
// other limiters on the same Redis (quotas, sliding windows, concurrency
// slots) send their request calls through it (Conn.Eval), so that they
// keep the rule, the wire deadline and the breaker the limiter's own
// calls keep (docs/limiter-design.md, "When is Redis down").
func (r *Redis) Transport() *redisconn.Conn { return r.conn }

// Lateness is the node's recent scheduling lateness: how late, at most,
// the gateway's goroutines woke over about the last second (a probe's
// short sleeps, callers' timers). Zero without Pipeline.
func (r *Redis) Lateness() time.Duration {
	if r.conn == nil {
		return 0
	}
	return r.conn.Lateness()
}

// Grace is how much longer than Timeout, on the node's on-time clock, a
// silent Redis is waited for now (at most BusyTimeout in all) before a
// request fails closed: the slowest answer Redis gave over the last
// second (see lateness). About zero on a quiet node; zero without
// Pipeline.
func (r *Redis) Grace() time.Duration {
	if r.conn == nil {
		return 0
	}
	return r.conn.Grace()
}

// State is the breaker's state; reading it also moves an open breaker whose
// time is up to half-open.
func (r *Redis) State() gobreaker.State { return r.health.State() }
