// Package invalidate announces changes that gateways cache (a key revoked, a
// vendor's status or services changed) on the Redis pub/sub channel
// wire.InvalidationChannel, so that every gateway drops its entry at once
// instead of waiting out its cache TTL.
package invalidate

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"vendorgate/shared/wire"
)

// Options configure a Publisher.
type Options struct {
	// URLs are redis:// URLs: one for a plain server, several for a
	// cluster, or the sentinels when MasterName is set.
	URLs []string
	// MasterName selects Sentinel.
	MasterName string
	// Timeout bounds one PUBLISH: a change must not hang an operator's
	// command behind a sick Redis. Required (the backend passes its
	// publishTimeout).
	Timeout time.Duration
}

// Publisher publishes invalidations. It is safe for concurrent use.
type Publisher struct {
	client  redis.UniversalClient
	timeout time.Duration
}

// New builds a Publisher; it does not dial until the first Publish.
func New(o Options) (*Publisher, error) {
	if len(o.URLs) == 0 {
		return nil, fmt.Errorf("invalidate: no redis url")
	}
	if o.Timeout <= 0 {
		return nil, fmt.Errorf("invalidate: timeout %s must be positive", o.Timeout)
	}
	uo, err := universalOptions(o.URLs, o.MasterName)
	if err != nil {
		return nil, err
	}
	return &Publisher{client: redis.NewUniversalClient(uo), timeout: o.Timeout}, nil
}

func universalOptions(urls []string, master string) (*redis.UniversalOptions, error) {
	first, err := redis.ParseURL(urls[0])
	if err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	uo := &redis.UniversalOptions{
		Username:     first.Username,
		Password:     first.Password,
		DB:           first.DB,
		TLSConfig:    first.TLSConfig,
		MasterName:   master,
		DialTimeout:  time.Second,
		ReadTimeout:  time.Second,
		WriteTimeout: time.Second,
		MaxRetries:   1,
	}
	for _, raw := range urls {
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil {
			return nil, fmt.Errorf("redis url: %w", err)
		}
		uo.Addrs = append(uo.Addrs, u.Host)
	}
	if len(urls) > 1 && master == "" {
		uo.IsClusterMode = true
		uo.DB = 0
	}
	return uo, nil
}

// Publish sends msg on wire.InvalidationChannel.
func (p *Publisher) Publish(ctx context.Context, msg wire.Invalidation) error {
	body, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	if err := p.client.Publish(ctx, wire.InvalidationChannel, body).Err(); err != nil {
		return fmt.Errorf("publish invalidation: %w", err)
	}
	return nil
}

// Close closes the Redis connections.
func (p *Publisher) Close() error { return p.client.Close() }
