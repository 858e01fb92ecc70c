// Package concurrency caps how many requests of a class a vendor (or a
// key) has in flight at once over every gateway: the policies of kind
// concurrency. A request takes a slot of each such policy of its route
// when it is admitted and gives them back when its answer is done (a
// streamed report at its last byte or when the stream is cut).
//
// In Redis a policy's bucket is a sorted set of the slots held, each
// member scored by the time it expires (Redis's clock, TIME). A gateway
// refreshes the expiry of the slots it holds every Refresh; a slot whose
// gateway died (kill -9, a lost host) is not refreshed and is freed TTL
// after its last refresh at the latest: the next request that counts the
// set drops the expired members first. Without Redis (Local), the slots
// are counted in process and hold for this gateway only.
package concurrency

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"vendorgate/gateway/limit/redisconn"
	"vendorgate/gateway/policy"
)

// Slot is one policy's slot a request asks for: the bucket (Key, the
// policy's bucket name for the request's vendor or key) and its cap.
type Slot struct {
	Key string
	Cap int
	// Policy is the row's index in its table (for the caller's books).
	Policy int
}

// Slots are the slots of one request, by value (up to MaxChecks).
type Slots struct {
	Count int
	List  [policy.MaxChecks]Slot
}

// Add appends s; it ignores slots past MaxChecks.
func (ss *Slots) Add(s Slot) {
	if ss.Count < policy.MaxChecks {
		ss.List[ss.Count] = s
		ss.Count++
	}
}

// Limiter takes and gives back slots.
type Limiter interface {
	// Acquire takes one slot of each of ss, all or none: refused is the
	// index in ss of a slot at its cap (nothing taken), -1 when all were
	// taken (held gives them back). err: the slots could not be counted
	// (nothing taken).
	Acquire(ss *Slots) (held *Held, refused int, err error)
	// Held is how many requests hold slots at this gateway now.
	Held() int
	// Close stops the limiter's goroutines.
	Close()
}

// Held is the slots one admitted request holds. Release gives them back,
// once, then releases Then (the request's in-flight slot at this gateway,
// when set), so that one value held until the answer is done frees both.
type Held struct {
	owner releaser
	keys  [policy.MaxChecks]string
	// caps are the caps asked (Redis): the take's arguments point here.
	caps [policy.MaxChecks]int64
	n    int
	// seq names the slots in Redis: the member is the gateway's id and
	// seq, joined by the scripts.
	seq      uint64
	released atomic.Bool
	// Then is released after the slots.
	Then interface{ Release() }
}

type releaser interface{ release(h *Held) }

// Release gives the slots back (at most once) and releases Then.
func (h *Held) Release() {
	if h.released.Swap(true) {
		return
	}
	h.owner.release(h)
	if h.Then != nil {
		h.Then.Release()
	}
}

// Options configures a Redis limiter.
type Options struct {
	// Client is the limiter's own (its own pool): a request's slot call and
	// the refreshes never wait for another part's connections.
	Client redis.UniversalClient
	// TTL is how long a slot lives without a refresh: a dead gateway's
	// slots are free TTL after their last refresh at the latest.
	TTL time.Duration
	// Refresh is how often a gateway renews the expiry of the slots it
	// holds; below TTL (a third of it leaves two refreshes to miss).
	Refresh time.Duration
	// Conn (required) is the rate limiter's transport to the same Redis: a
	// request's slot call goes through it (Conn.Eval), in the limiter's
	// pipelined round trips, judged by its rule (docs/limiter-design.md, "When is
	// Redis down") and counted by its breaker. (The refreshes and releases
	// stay on Client.)
	Conn *redisconn.Conn
	// Timeout is how soon a failed refresh is tried again (at most
	// Refresh), and, a second at least, bounds the refreshes and releases.
	Timeout time.Duration
	// OnError is told of a refresh or release that failed (a slot then
	// lives until its expiry); may be nil.
	OnError func(what string, err error)
	// OnLost is told of the live slots a refresh found gone from Redis
	// and put back (Redis lost them: a flush, a restart without its data,
	// a failover, or stopped past TTL); may be nil.
	OnLost func(n int)
}

// Redis is the limiter every gateway sharing one Redis counts in.
type Redis struct {
	o     Options
	id    string // this gateway's members are id-seq
	seq   atomic.Uint64
	ttl   int64 // TTL in milliseconds, for the scripts
	mu    sync.Mutex
	held  map[*Held]struct{}
	calls calls // the releases' and refreshes' script calls

	releases chan *Held
	stop     chan struct{}
	done     sync.WaitGroup
	closed   sync.Once
}

// NewRedis returns a Redis limiter and starts its refresher and releaser;
// Close stops them.
func NewRedis(o Options) (*Redis, error) {
	switch {
	case o.Client == nil:
		return nil, errors.New("concurrency: redis client required")
	case o.Conn == nil:
		return nil, errors.New("concurrency: redis transport required")
	case o.TTL <= 0 || o.Refresh <= 0 || o.Refresh >= o.TTL:
		return nil, fmt.Errorf("concurrency: refresh (%s) must be positive and below the slot TTL (%s)", o.Refresh, o.TTL)
	case o.Timeout <= 0:
		return nil, errors.New("concurrency: timeout must be positive")
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	_, cluster := o.Client.(*redis.ClusterClient)
	r := &Redis{o: o, id: hex.EncodeToString(b[:]) + "-", ttl: o.TTL.Milliseconds(), calls: calls{cluster: cluster},
		held: make(map[*Held]struct{}), releases: make(chan *Held, releaseBatch*16), stop: make(chan struct{})}
	r.done.Add(2)
	go r.refresher()
	go r.releaser()
	return r, nil
}

// acquireScript counts and takes one slot of each set, all or none.
// KEYS: the sets; ARGV[1] and ARGV[2] the member (the gateway's id and the
// request's number), ARGV[3] the TTL in milliseconds, then each set's cap.
// Expired members are dropped first. Returns the 1-based index of a set at
// its cap, or 0 when every slot was taken.
var acquireScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local member = ARGV[1] .. ARGV[2]
local ttl = tonumber(ARGV[3])
for i = 1, #KEYS do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
  if redis.call('ZCARD', KEYS[i]) >= tonumber(ARGV[i + 3]) then return i end
end
for i = 1, #KEYS do
  redis.call('ZADD', KEYS[i], now + ttl, member)
  redis.call('PEXPIRE', KEYS[i], ttl)
end
return 0
`)

// refreshScript renews the expiry of many requests' members, each in its
// sets, and puts a member back in a set that no longer holds it (Redis
// lost it: a flush, a restart or a failover without the data, or its
// expiry passed while Redis was stopped or unreachable): the request
// holding it is still in flight. KEYS: every request's sets, one request
// after the other; ARGV[1] the gateway's id, ARGV[2] the TTL in
// milliseconds, then for each request its number of sets and its number.
// Returns, by request, how many sets its member was put back in.
var refreshScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
local back = {}
local k = 0
for i = 3, #ARGV, 2 do
  local n = tonumber(ARGV[i])
  local member = ARGV[1] .. ARGV[i + 1]
  local b = 0
  for j = k + 1, k + n do
    b = b + redis.call('ZADD', KEYS[j], now + ttl, member)
    redis.call('PEXPIRE', KEYS[j], ttl)
  end
  back[#back + 1] = b
  k = k + n
end
return back
`)

// releaseScript removes many requests' members from their sets. KEYS and
// ARGV as refreshScript's, without the TTL: ARGV[1] the gateway's id, then
// for each request its number of sets and its number.
var releaseScript = redis.NewScript(`
local k = 0
for i = 2, #ARGV, 2 do
  local n = tonumber(ARGV[i])
  local member = ARGV[1] .. ARGV[i + 1]
  for j = k + 1, k + n do redis.call('ZREM', KEYS[j], member) end
  k = k + n
end
return 0
`)

// Acquire takes a slot of each of ss in one script call.
func (r *Redis) Acquire(ss *Slots) (*Held, int, error) {
	if ss.Count == 0 {
		return nil, -1, nil
	}
	h := &Held{owner: r, n: ss.Count, seq: r.seq.Add(1)}
	call, keys, args, err := r.call(ss.Count, 3+ss.Count)
	if err != nil {
		return nil, -1, fmt.Errorf("concurrency: take slots: %w", err)
	}
	// The arguments point at the limiter's and the Held's fields (go-redis
	// writes what they point at): no value boxed, no allocation. The Held
	// outlives the call, which a sender may still read after its caller
	// gave up.
	args[0], args[1], args[2] = &r.id, &h.seq, &r.ttl
	for i := 0; i < ss.Count; i++ {
		keys[i], h.keys[i] = ss.List[i].Key, ss.List[i].Key
		h.caps[i] = int64(ss.List[i].Cap)
		args[3+i] = &h.caps[i]
	}
	// Held before the call: a slot Redis took whose answer came too late
	// is refreshed until it is given back below, not leaked for a TTL.
	r.mu.Lock()
	r.held[h] = struct{}{}
	r.mu.Unlock()
	n, err := r.acquire(call, keys, args)
	switch {
	case err != nil:
		h.released.Store(true)
		r.release(h) // a timed-out call may have taken the slots
		return nil, -1, fmt.Errorf("concurrency: take slots: %w", err)
	case n != 0:
		// Refused: the script took nothing, so nothing goes back.
		h.released.Store(true)
		r.mu.Lock()
		delete(r.held, h)
		r.mu.Unlock()
		return nil, n - 1, nil
	}
	return h, -1, nil
}

// call is where the slot call's keys and arguments go: a Call's (its
// arrays: nothing to copy, nothing to allocate), of the lengths asked,
// with room for them. It refuses more than a Call carries.
func (r *Redis) call(nkeys, nargs int) (*redisconn.Call, []string, []any, error) {
	if nkeys > redisconn.MaxKeys || nargs > redisconn.MaxArgs {
		return nil, nil, nil, fmt.Errorf("%d keys and %d arguments, past a call's %d and %d", nkeys, nargs, redisconn.MaxKeys, redisconn.MaxArgs)
	}
	c := r.o.Conn.Call()
	return c, c.Keys[:nkeys], c.Args[:nargs], nil
}

// acquire runs acquireScript for keys and args (call's arrays, from
// r.call) through Conn (Eval).
func (r *Redis) acquire(call *redisconn.Call, keys []string, args []any) (int, error) {
	call.Script, call.NKeys, call.NArgs = acquireScript, len(keys), len(args)
	raw, err := r.o.Conn.Eval(call)
	if err != nil {
		return 0, err
	}
	n, ok := raw.(int64)
	if !ok {
		return 0, fmt.Errorf("reply %T, want an integer", raw)
	}
	return int(n), nil
}

// release forgets h and hands its members to the releaser (never a Redis
// call on the answer's path: the handler's deferred release runs before
// the answer is written); with the releaser's queue full, a goroutine of
// its own.
func (r *Redis) release(h *Held) {
	r.mu.Lock()
	delete(r.held, h)
	r.mu.Unlock()
	select {
	case r.releases <- h:
	default:
		go r.remove([]*Held{h})
	}
}

func (r *Redis) releaser() {
	defer r.done.Done()
	batch := make([]*Held, 0, releaseBatch)
	for {
		select {
		case <-r.stop:
			for {
				select {
				case h := <-r.releases:
					batch = append(batch, h)
				default:
					r.remove(batch)
					return
				}
			}
		case h := <-r.releases:
			batch = append(batch[:0], h)
		more:
			for len(batch) < cap(batch) {
				select {
				case h := <-r.releases:
					batch = append(batch, h)
				default:
					break more
				}
			}
			r.remove(batch)
		}
	}
}

// remove takes the members of hs out of their sets: one script call for
// them all (with Redis Cluster, one a hash slot), in one pipeline.
func (r *Redis) remove(hs []*Held) {
	if len(hs) == 0 {
		return
	}
	_, _ = r.run(releaseScript, hs, "release", true)
}

// refresher renews the expiry of every held slot each Refresh. After a
// refresh that failed it tries again at once (each try bounded as every
// pipeline is), so that the first refresh Redis answers after an outage
// puts back the slots it lost.
func (r *Redis) refresher() {
	defer r.done.Done()
	t := time.NewTimer(r.o.Refresh)
	defer t.Stop()
	var told time.Time // the last failure told to OnError
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
		// While it fails, told once a Refresh, as before the retries.
		if r.refresh(time.Since(told) >= r.o.Refresh) {
			told = time.Time{}
			t.Reset(r.o.Refresh)
		} else {
			if time.Since(told) >= r.o.Refresh {
				told = time.Now()
			}
			// A refused connection fails at once: not a busy loop.
			t.Reset(min(r.o.Timeout, r.o.Refresh))
		}
	}
}

// refresh renews every held slot in one pipeline and reports whether
// Redis answered; a failure is told to OnError when tell is set. A member
// a refresh put back whose request was released meanwhile (its release may
// have reached Redis first) is released again.
func (r *Redis) refresh(tell bool) bool {
	r.mu.Lock()
	hs := make([]*Held, 0, len(r.held))
	for h := range r.held {
		hs = append(hs, h)
	}
	r.mu.Unlock()
	if len(hs) == 0 {
		return true
	}
	back, err := r.run(refreshScript, hs, "refresh", tell)
	if err != nil {
		return false
	}
	lost := 0
	for i, h := range hs {
		if back[i] == 0 {
			continue
		}
		if h.released.Load() {
			r.release(h)
			continue
		}
		lost++
	}
	if lost > 0 && r.o.OnLost != nil {
		r.o.OnLost(lost)
	}
	return true
}

// run runs script (releaseScript or refreshScript) for hs in one pipeline,
// one script call per batch of calls (see calls), and returns by request
// what the refresh script answered for it (0 where a call failed, and for
// a release); a failure is told to OnError once per pipeline when tell is
// set, and returned.
func (r *Redis) run(script *redis.Script, hs []*Held, what string, tell bool) ([]int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), max(r.o.Timeout, time.Second))
	defer cancel()
	refresh := script == refreshScript
	batches := r.calls.batches(hs, &r.id, refresh, &r.ttl)
	keys := make([][]string, len(batches))
	args := make([][]any, len(batches))
	for i := range batches {
		keys[i], args[i] = batches[i].keys, batches[i].args
	}
	cmds, err := redisconn.RunScripts(ctx, r.o.Client, script, keys, args)
	if err != nil {
		if tell && r.o.OnError != nil {
			r.o.OnError(what, err)
		}
		return nil, err
	}
	out := make([]int64, len(hs))
	if refresh {
		for i, b := range batches {
			backs, _ := cmds[i].Int64Slice()
			for j, n := range backs {
				if p := b.place(j); p < len(out) {
					out[p] = n
				}
			}
		}
	}
	return out, nil
}

// Held is how many requests hold slots at this gateway now.
func (r *Redis) Held() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.held)
}

// Close stops the refresher and gives back what the releaser was handed.
// Slots still held expire TTL after their last refresh.
func (r *Redis) Close() {
	r.closed.Do(func() {
		close(r.stop)
		r.done.Wait()
	})
}

// Local counts slots in process: a gateway without Redis.
type Local struct {
	mu     sync.Mutex
	counts map[string]int
	held   int
}

// NewLocal returns an empty Local limiter.
func NewLocal() *Local { return &Local{counts: make(map[string]int)} }

// Acquire takes a slot of each of ss, all or none.
func (l *Local) Acquire(ss *Slots) (*Held, int, error) {
	if ss.Count == 0 {
		return nil, -1, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := 0; i < ss.Count; i++ {
		if l.counts[ss.List[i].Key] >= ss.List[i].Cap {
			return nil, i, nil
		}
	}
	h := &Held{owner: l, n: ss.Count}
	for i := 0; i < ss.Count; i++ {
		h.keys[i] = ss.List[i].Key
		l.counts[h.keys[i]]++
	}
	l.held++
	return h, -1, nil
}

// Held is how many requests hold slots now.
func (l *Local) Held() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held
}

func (l *Local) release(h *Held) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held--
	for _, k := range h.keys[:h.n] {
		if l.counts[k]--; l.counts[k] <= 0 {
			delete(l.counts, k)
		}
	}
}

// Close does nothing: Local has no goroutine.
func (l *Local) Close() {}
