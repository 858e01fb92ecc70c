package auth

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"log/slog"

	"github.com/redis/go-redis/v9"

	"vendorgate/shared/wire"
)

// Subscriber drops cache entries when the backend announces a revoked key
// or a changed vendor on wire.InvalidationChannel. Close stops it.
type Subscriber struct {
	ps   *redis.PubSub
	done chan struct{}
}

// Subscribe starts listening. Every (re)subscription purges the cache:
// messages published while the connection was down are lost, and the cache
// must not outlive them. client should have ordinary timeouts (not the
// limiter's tens of milliseconds).
func Subscribe(client redis.UniversalClient, cache *Cache, log *slog.Logger) *Subscriber {
	s := &Subscriber{ps: client.Subscribe(context.Background(), wire.InvalidationChannel), done: make(chan struct{})}
	ch := s.ps.ChannelWithSubscriptions()
	go func() {
		defer close(s.done)
		for msg := range ch {
			switch m := msg.(type) {
			case *redis.Subscription:
				if m.Kind == "subscribe" {
					cache.Purge()
					log.Info("key invalidation subscribed", "channel", m.Channel)
				}
			case *redis.Message:
				apply(cache, m.Payload, log)
			}
		}
	}()
	return s
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
	err := s.ps.Close()
	<-s.done
	return err
}
