package auth

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"time"

	"github.com/redis/go-redis/v9"

	"vendorgate/shared/wire"
)

// The subscriber's heartbeat: an idle subscription is pinged every
// subscriberPing, and one silent for subscriberGap counts as broken (a
// paused or unreachable Redis does not close the connection).
const (
	subscriberPing  = time.Second
	subscriberGap   = 3 * time.Second
	subscriberRetry = 250 * time.Millisecond // between attempts while Redis refuses
)

// Subscriber drops cache entries when the backend announces a revoked key
// or a changed vendor on wire.InvalidationChannel, and tells the cache
// whether those announcements reach it: while they do, working keys are
// cached for long (CacheOptions.PushedTTL); a gap (the connection broken,
// or silent past its heartbeat) shortens every entry to TTL from the last
// moment the subscription was known to work, and subscribing again drops
// the working keys cached before (Cache.PushesFlowing). Close stops it.
type Subscriber struct {
	ps    *redis.PubSub
	cache *Cache
	log   *slog.Logger
	stop  chan struct{}
	done  chan struct{}
}

// Subscribe starts listening. client should have ordinary timeouts (not
// the limiter's tens of milliseconds).
func Subscribe(client redis.UniversalClient, cache *Cache, log *slog.Logger) *Subscriber {
	s := &Subscriber{ps: client.Subscribe(context.Background(), wire.InvalidationChannel), cache: cache, log: log,
		stop: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	return s
}

// run receives until Close. Pushes count as flowing from the first reply
// on a connection: go-redis sends SUBSCRIBE first on every new connection,
// so anything heard on one comes after the subscription.
func (s *Subscriber) run() {
	defer close(s.done)
	ctx := context.Background()
	flowing := false
	// heard is when a reply last came, on the wall clock for the heartbeat
	// and on the cache's clock for the entries it bounds.
	heard, heardAt := time.Now(), s.cache.now()
	for {
		msg, err := s.ps.ReceiveTimeout(ctx, subscriberPing)
		select {
		case <-s.stop:
			return
		default:
		}
		if err != nil {
			timeout := isTimeout(err)
			if flowing && (!timeout || time.Since(heard) > subscriberGap) {
				flowing = false
				s.cache.PushesStopped(heardAt)
				s.log.Warn("key invalidations interrupted: cached keys kept for key_cache.ttl", "err", err)
			}
			if timeout {
				_ = s.ps.Ping(ctx) // its answer, or the error, is the next receive's
				continue
			}
			select {
			case <-s.stop:
				return
			case <-time.After(subscriberRetry):
			}
			continue
		}
		heard, heardAt = time.Now(), s.cache.now()
		if !flowing {
			flowing = true
			dropped := s.cache.PushesFlowing()
			s.log.Info("key invalidation subscribed", "channel", wire.InvalidationChannel, "cached_keys_dropped", dropped)
		}
		if m, ok := msg.(*redis.Message); ok {
			apply(s.cache, m.Payload, s.log)
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func apply(cache *Cache, payload string, log *slog.Logger) {
	var inv wire.Invalidation
	if err := json.Unmarshal([]byte(payload), &inv); err != nil {
		log.Warn("invalidation message not understood", "err", err)
		return
	}
	if inv.KeyHash != "" {
		var sum [32]byte
		if n, err := hex.Decode(sum[:], []byte(inv.KeyHash)); err != nil || n != 32 {
			log.Warn("invalidation key hash not understood")
		} else {
			cache.InvalidateKey(&sum)
		}
	}
	if inv.VendorID != "" {
		cache.InvalidateVendor(inv.VendorID)
	}
}

// Close stops the subscriber and waits for it.
func (s *Subscriber) Close() error {
	close(s.stop)
	err := s.ps.Close()
	<-s.done
	return err
}
