// Package auth resolves an API key to the vendor it belongs to: a bounded
// in-process cache first, then, on a miss, format, prefix and MAC checked
// locally and the backend's internal key lookup. Only a key whose MAC
// verifies is ever cached or looked up. Expiry and revocation are checked
// on every request, cached or not. The key itself is never stored or
// logged: its SHA-256 finds it at the backend, its key id names it.
//
// The cache finds a key by its tag (Tag), not its SHA-256: two 64-bit
// hash/maphash sums of the whole key under two seeds drawn at random when
// the process starts and never written anywhere, 128 bits, about a
// fifteenth of the SHA-256's cost. Why that is safe: a presented key is
// served another key's identity only if its tag equals the tag of a
// cached key. Every cached key passed its MAC check when it was cached,
// and its secret holds 24 random bytes the presenter does not know (a
// key it does know authenticates as that key's vendor anyway, so a
// collision crafted from a known key gains nothing), under seeds it does
// not know: each attempt matches one of N cached keys with a chance of
// about N in 2^128 (2^-111 at 100,000 keys), and a miss tells it nothing
// but that it missed. maphash is not a cryptographic hash: it is not asked
// to resist collisions between inputs an attacker knows, only to spread
// secret random inputs under a secret seed, which no one can aim at. Two
// keys the backend issued collide with a chance of about N^2 in 2^129. A
// hit is a key that parsed and verified when it was cached: it is not
// parsed again, only its prefix is checked against the environment of its
// record. What must agree across replicas and with the backend keeps the
// SHA-256 (Sum): the backend lookup, the entry's background refresh, the
// failed-key throttle, and invalidations, which the backend publishes by
// SHA-256 (each cache entry keeps its key's SHA-256 to be found by it).
package auth

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"vendorgate/gateway/inflight"
	"vendorgate/gateway/policy"
	"vendorgate/gateway/usage"
	"vendorgate/shared/apikey"
	"vendorgate/shared/logctx"
	"vendorgate/shared/wire"
)

// Outcomes of Authenticate that callers branch on.
var (
	ErrMissingKey = errors.New("no api key")
	ErrMalformed  = errors.New("malformed api key")
	ErrForeignKey = errors.New("api key not issued by this server")
	// ErrBadSignature is a well-formed key whose MAC does not verify under
	// any key-signing secret: not a key this deployment issued.
	ErrBadSignature = errors.New("api key signature does not verify")
	ErrUnknownKey   = errors.New("unknown api key")
	ErrRevoked      = errors.New("revoked api key")
	ErrKeyExpired   = errors.New("expired api key")
)

// Identity is what a resolved key says about its caller. It is shared by
// every request that presents the key while cached: never modify one.
type Identity struct {
	KeyID    string
	VendorID string
	Revoked  bool
	// env and status are the key's environment and the vendor's account
	// status (Environment, Status) as their places in environments and
	// statuses: two bytes, where two strings were 32 in every cached key.
	env, status uint8
	// expiresAt is when the key expires, revokeAt when a rotation revokes
	// it (0: none scheduled; from then on it is refused as revoked, even
	// while cached), in Unix nanoseconds: 8 bytes each rather than a
	// time.Time's 24, in every cached key.
	expiresAt, revokeAt int64
	// Usage counts the vendor's requests per policy (nil: not counted).
	Usage *usage.Counter
	// InFlight are the vendor's requests in flight here (nil: none handed;
	// Options.InFlight), kept here so that a request looks nothing up.
	InFlight *inflight.Counts

	// buckets are the key's bucket names by policy index, built on the
	// first request under a policy layout and kept until the layout
	// changes (a reload that adds or removes a policy).
	buckets atomic.Pointer[policy.Buckets]
}

// ExpiresAt is when the key expires.
func (id *Identity) ExpiresAt() time.Time { return time.Unix(0, id.expiresAt) }

// Environment is the key's environment (apikey.Sandbox, apikey.Live); ""
// for one this gateway does not know, which no prefix names.
func (id *Identity) Environment() string { return environments[id.env] }

// Status is the vendor's account status (wire.VendorApproved, ...); ""
// for one this gateway does not know, which admits nothing.
func (id *Identity) Status() string { return statuses[id.status] }

// The environments and statuses an Identity can hold, by place; place 0
// is any other.
var (
	environments = [...]string{"", apikey.Sandbox, apikey.Live}
	statuses     = [...]string{"", wire.VendorApproved, wire.VendorPending, wire.VendorSuspended}
)

// placeOf is s's place in known, 0 when it is none of them.
func placeOf(s string, known []string) uint8 {
	for i, k := range known[1:] {
		if s == k {
			return uint8(i + 1)
		}
	}
	return 0
}

// RevokeAt is when a rotation revokes the key; the zero time when none is
// scheduled.
func (id *Identity) RevokeAt() time.Time {
	if id.revokeAt == 0 {
		return time.Time{}
	}
	return time.Unix(0, id.revokeAt)
}

// Buckets returns the key's bucket names under layout l, indexed by
// policy: built once per key and layout, so a request does not allocate.
func (id *Identity) Buckets(l *policy.Layout) *policy.Buckets {
	if b := id.buckets.Load(); b != nil && b.Layout == l {
		return b
	}
	b := l.Buckets(id.VendorID, id.KeyID)
	id.buckets.Store(b)
	return b
}

// Lookup asks the backend about a key hash (hex SHA-256). It returns nil
// and no error when no key has that hash. ctx carries the request that
// waits on it, if any: its trace span and its request id
// (logctx.WithRequestID), sent on with the call.
type Lookup interface {
	Lookup(ctx context.Context, keyHash string) (*wire.KeyResolution, error)
}

// Options configures an Authenticator.
type Options struct {
	Prefixes apikey.Prefixes
	// Signer verifies the MAC of every key before it is looked up.
	Signer *apikey.Signer
	Cache  *Cache
	Lookup Lookup
	// Now is the clock for expiry; time.Now when nil.
	Now func() time.Time
	// Usage hands each resolved identity its vendor's usage counter; nil
	// counts nothing.
	Usage *usage.Recorder
	// InFlight hands each resolved identity its vendor's in-flight counts;
	// nil hands none (the admission then finds them by vendor).
	InFlight *inflight.Counter
	// MaxRefreshes bounds the background refreshes in flight (lookups no
	// request waits for), so that they leave part of the lookup pool to
	// the requests that miss; those due meanwhile wait in due order.
	// Required.
	MaxRefreshes int
}

// refreshRetry is how long a working key whose refresh failed is served
// before a request tries to refresh it again (it expires meanwhile as it
// would have).
const refreshRetry = time.Second

// Authenticator resolves keys.
type Authenticator struct {
	prefixes apikey.Prefixes
	signer   *apikey.Signer
	cache    *Cache
	lookup   Lookup
	now      func() time.Time
	usage    *usage.Recorder
	inflight *inflight.Counter

	// flights coalesce concurrent lookups of one key hash. When a busy key's
	// cache entry expires, every request presenting it misses at once: one
	// lookup answers them all, instead of a burst that fills the lookup
	// pool (its failures would trip the lookup breaker and answer 503).
	// A background refresh is a flight too: a request that misses the
	// same key meanwhile joins it, and a key is refreshed once at a time.
	flightMu   sync.Mutex
	flights    map[[32]byte]*flight
	refreshing int // refreshes in flight (under flightMu)
	refresher  refresher
}

// flight is one lookup in progress; done closes when id and err are set.
type flight struct {
	gen     uint64 // the cache generation it started in
	waiters int    // callers that joined it (under flightMu)
	done    chan struct{}
	id      *Identity
	err     error
}

// New returns an Authenticator.
func New(o Options) (*Authenticator, error) {
	if o.Cache == nil || o.Lookup == nil || o.Signer == nil {
		return nil, errors.New("auth: cache, lookup and signer required")
	}
	if err := o.Prefixes.Validate(); err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MaxRefreshes <= 0 {
		return nil, fmt.Errorf("auth: max refreshes %d must be positive", o.MaxRefreshes)
	}
	a := &Authenticator{prefixes: o.Prefixes, signer: o.Signer, cache: o.Cache, lookup: o.Lookup, now: o.Now, usage: o.Usage, inflight: o.InFlight,
		flights: make(map[[32]byte]*flight)}
	a.refresher = refresher{a: a, max: o.MaxRefreshes}
	return a, nil
}

// Cache is the authenticator's cache, for invalidation.
func (a *Authenticator) Cache() *Cache { return a.cache }

// Sum is the SHA-256 of a presented key, (in hex) the lookup key and what
// an invalidation names a key by. The throttle counts failures of one key
// by it as well.
func Sum(raw []byte) [32]byte { return sha256.Sum256(raw) }

// tagSeeds are this process's secret seeds of Tag: random, never written
// or sent anywhere.
var tagSeeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}

// Tag is the key cache's 128-bit tag of a presented key: two maphash sums
// under this process's secret seeds (the package's documentation argues
// why a tag may stand for the key in the cache).
func Tag(raw []byte) (t [16]byte) {
	binary.LittleEndian.PutUint64(t[:8], maphash.Bytes(tagSeeds[0], raw))
	binary.LittleEndian.PutUint64(t[8:], maphash.Bytes(tagSeeds[1], raw))
	return t
}

// taggable reports whether raw has a length Parse accepts: only such a key
// is tagged (none other was ever cached), so that a hostile header is not
// hashed at any length.
func taggable(raw []byte) bool {
	return len(raw) >= apikey.PrefixLen+1+apikey.MinSecretLen && len(raw) <= apikey.PrefixLen+1+apikey.MaxSecretLen
}

// Signed reports whether raw, an X-API-Key header value, is well-formed,
// has one of this deployment's prefixes and carries a MAC that verifies:
// a key this deployment could have issued, whether or not it is known,
// revoked or expired. It reads no cache and calls no one, and does not
// allocate: the server asks it from the headers alone, before it sets
// memory aside for a body.
func (a *Authenticator) Signed(raw []byte) bool {
	if len(raw) == 0 {
		return false
	}
	key, err := apikey.Parse(unsafe.String(unsafe.SliceData(raw), len(raw)), a.prefixes)
	return err == nil && a.signer.Verify(key)
}

// Authenticate resolves raw, the X-API-Key header value. Errors: the
// sentinels above, or a lookup failure wrapped (the caller answers 503: it
// cannot tell whether the key is good). A key not cached is looked up
// under rid, the request's id, and trace, the context of its span (nil:
// none), so that the backend's lookup is found under both; they are copied
// only then.
func (a *Authenticator) Authenticate(raw []byte, rid []byte, trace context.Context) (*Identity, error) {
	if len(raw) == 0 {
		return nil, ErrMissingKey
	}
	// The cache first: it holds only keys that parsed and whose MAC
	// verified when they were looked up, so a hit needs neither again (the
	// cost of every request of every working key). Its environment is the
	// one check that depends on the key's prefix (a record of another
	// environment's key is refused, cached or not).
	var tag [16]byte
	if taggable(raw) {
		tag = Tag(raw)
		id, found, refresh := a.cache.Get(&tag)
		if refresh {
			a.refresh(&tag)
		}
		if found {
			if id == nil {
				return nil, ErrUnknownKey
			}
			if p, err := a.prefixes.For(id.Environment()); err != nil || string(raw[:apikey.PrefixLen]) != p {
				return nil, ErrUnknownKey
			}
			return a.check(id)
		}
	}
	// Parse does not retain its argument: no copy of the key is made.
	key, err := apikey.Parse(unsafe.String(unsafe.SliceData(raw), len(raw)), a.prefixes)
	switch {
	case errors.Is(err, apikey.ErrForeignPrefix):
		return nil, ErrForeignKey
	case err != nil:
		return nil, ErrMalformed
	}
	// A key we did not sign is refused here: it is never cached, so a
	// flood of random keys neither reaches the backend nor evicts real
	// entries.
	if !a.signer.Verify(key) {
		return nil, ErrBadSignature
	}
	sum := Sum(raw)
	a.cache.Missed(&tag)
	id, err := a.resolve(&tag, &sum, rid, trace)
	if err != nil {
		return nil, err
	}
	if id == nil {
		return nil, ErrUnknownKey
	}
	if id.Environment() != key.Environment {
		return nil, ErrUnknownKey // the prefix names another environment than the key's record
	}
	return a.check(id)
}

// check refuses a resolved key that is revoked or expired.
func (a *Authenticator) check(id *Identity) (*Identity, error) {
	if id.Revoked {
		return id, ErrRevoked
	}
	now := a.now().UnixNano()
	if id.revokeAt != 0 && now >= id.revokeAt {
		return id, ErrRevoked // a rotation's overlap has ended
	}
	if now >= id.expiresAt {
		return id, ErrKeyExpired
	}
	return id, nil
}

// resolve looks sum up and caches the answer under tag, joining a lookup
// of the same hash already in flight unless an invalidation happened since
// it started (its answer may predate a revocation). The lookup carries the
// request id and trace of the request that starts it.
func (a *Authenticator) resolve(tag *[16]byte, sum *[32]byte, rid []byte, trace context.Context) (*Identity, error) {
	gen := a.cache.Generation()
	a.flightMu.Lock()
	if f, ok := a.flights[*sum]; ok && f.gen == gen {
		f.waiters++
		a.flightMu.Unlock()
		<-f.done
		return f.id, f.err
	}
	f := &flight{gen: gen, done: make(chan struct{})}
	a.flights[*sum] = f
	a.flightMu.Unlock()
	if trace == nil {
		trace = context.Background()
	}
	f.id, f.err = a.resolveOnce(logctx.WithRequestID(trace, string(rid)), tag, sum, gen, nil)
	a.flightMu.Lock()
	if a.flights[*sum] == f {
		delete(a.flights, *sum)
	}
	a.flightMu.Unlock()
	close(f.done)
	return f.id, f.err
}

// refresh schedules a background lookup of tag's key, whose entry is due for a
// refresh (Cache.Schedule sets when): the request goes on with the cached
// identity. Nothing happens while a refresh of the entry is scheduled or
// in flight.
func (a *Authenticator) refresh(tag *[16]byte) {
	if due, expires, sum, ok := a.cache.Schedule(tag); ok {
		a.refresher.add(refreshItem{due: due, expires: expires, tag: *tag, sum: sum})
	}
}

// refreshNow looks the scheduled entry of it up, unless a later entry or a
// lookup of the key in flight made it stale. A request that misses the key
// meanwhile joins the lookup.
func (a *Authenticator) refreshNow(it *refreshItem) {
	gen := a.cache.Generation()
	if a.cache.now().UnixNano() >= it.expires {
		a.cache.RefreshLate()
		return
	}
	old, ok := a.cache.Scheduled(&it.tag, it.expires)
	if !ok {
		return
	}
	a.flightMu.Lock()
	if _, ok := a.flights[it.sum]; ok {
		a.flightMu.Unlock()
		return
	}
	f := &flight{gen: gen, done: make(chan struct{})}
	a.flights[it.sum] = f
	a.refreshing++
	a.flightMu.Unlock()
	a.cache.Refreshing()
	f.id, f.err = a.resolveOnce(context.Background(), &it.tag, &it.sum, gen, old)
	if f.err != nil {
		a.cache.RefreshFailed()
		a.cache.Postpone(&it.tag, refreshRetry)
	}
	a.flightMu.Lock()
	if a.flights[it.sum] == f {
		delete(a.flights, it.sum)
	}
	a.refreshing--
	a.flightMu.Unlock()
	close(f.done)
}

// Close stops the background refreshes: those scheduled are dropped, and
// those in flight finish.
func (a *Authenticator) Close() { a.refresher.close() }

// RefreshesScheduled is the number of background refreshes waiting for
// their time or for a lookup slot.
func (a *Authenticator) RefreshesScheduled() int { return a.refresher.scheduled() }

// RefreshesInFlight is the number of background refreshes running.
func (a *Authenticator) RefreshesInFlight() int {
	a.flightMu.Lock()
	defer a.flightMu.Unlock()
	return a.refreshing
}

// resolveOnce looks sum up and caches the answer under tag. old, when set, is the
// identity cached before: it is kept when the answer says the same, so
// that its bucket names are not built again.
func (a *Authenticator) resolveOnce(ctx context.Context, tag *[16]byte, sum *[32]byte, gen uint64, old *Identity) (*Identity, error) {
	var h [64]byte
	hex.Encode(h[:], sum[:])
	res, err := a.lookup.Lookup(ctx, string(h[:]))
	if err != nil {
		return nil, fmt.Errorf("resolve key: %w", err)
	}
	var id *Identity
	if res != nil {
		id = identityOf(res)
		id.Usage = a.usage.For(id.VendorID)
		if a.inflight != nil {
			id.InFlight = a.inflight.For(id.VendorID)
		}
		if old != nil && old.same(id) {
			id = old
		}
	}
	a.cache.Put(tag, sum, id, gen)
	return id, nil
}

// same reports whether id says what o says.
func (id *Identity) same(o *Identity) bool {
	return id.KeyID == o.KeyID && id.VendorID == o.VendorID && id.env == o.env && id.status == o.status &&
		id.expiresAt == o.expiresAt && id.Revoked == o.Revoked && id.revokeAt == o.revokeAt && id.Usage == o.Usage &&
		id.InFlight == o.InFlight
}

func identityOf(r *wire.KeyResolution) *Identity {
	var revokeAt int64
	if r.RevokeAt != nil {
		revokeAt = max(unixNano(*r.RevokeAt), 1)
	}
	return &Identity{
		revokeAt:  revokeAt,
		KeyID:     r.KeyID,
		VendorID:  r.VendorID,
		env:       placeOf(r.Environment, environments[:]),
		status:    placeOf(r.Vendor.Status, statuses[:]),
		expiresAt: unixNano(r.ExpiresAt),
		Revoked:   r.RevokedAt != nil,
	}
}

// unixNano is t in Unix nanoseconds, the representable range's ends for a
// time before or after it (time.Time.UnixNano is undefined there: a key
// expiring past 2262 must not read as expired, nor the zero time as far
// ahead).
func unixNano(t time.Time) int64 {
	switch {
	case t.Before(minUnixNano):
		return math.MinInt64
	case t.After(maxUnixNano):
		return math.MaxInt64
	}
	return t.UnixNano()
}

var minUnixNano, maxUnixNano = time.Unix(0, math.MinInt64), time.Unix(0, math.MaxInt64)
