// Package probe asks the gateway's dependencies, on its own schedule, whether
// they answer: Redis with a PING, each backend with its internal readiness
// call. The breakers only learn of an outage from traffic, so an idle
// gateway would read ready forever with Redis gone; the prober is what lets
// /readyz tell the truth with or without traffic.
//
// Each dependency has its own goroutine, so a hung backend does not delay
// the Redis verdict. A single failed probe turns the dependency unready and
// a single success turns it ready again: the verdict lags the truth by at
// most Interval plus the probe's timeout.
package probe

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"

	"vendorgate/shared/hoptls"
	"vendorgate/shared/wire"
)

// ErrNotProbed is the verdict of a dependency whose first probe has not
// finished (only seen when New's wait for it was cut short by Close).
var ErrNotProbed = errors.New("not probed yet")

// Options configure a Prober. RedisTimeout, BackendTimeout and Interval
// are required: New refuses a zero.
type Options struct {
	// Redis is pinged when set; nil means no Redis (the in-process limiter)
	// and no Redis verdict. With a Cluster, every master is pinged.
	Redis redis.UniversalClient
	// RedisTimeout bounds one PING (the limiter's redis.timeout): a Redis
	// slower than the limiter allows is not ready for it.
	RedisTimeout time.Duration
	// Backends are the backends' base URLs; each is asked
	// GET wire.ReadyPath with the internal token.
	Backends      []string
	InternalToken string
	// BackendTimeout bounds one backend probe: a hung backend is unready
	// within Interval + BackendTimeout.
	BackendTimeout time.Duration
	// BackendTLS is the client configuration of https backends; nil: the
	// system's roots.
	BackendTLS *tls.Config
	// Interval is the time between the starts of two probes of one
	// dependency.
	Interval time.Duration
	// Logger is told when a dependency changes verdict, unless OnChange is
	// set. Default slog.Default().
	Logger *slog.Logger
	// OnChange, when set, is told instead of Logger when a dependency
	// changes verdict: err is the failure when it became unready, nil when
	// it is ready again. It runs on the dependency's probe goroutine.
	OnChange func(dependency string, err error)
}

// Prober holds the latest verdict of every dependency. New starts its
// goroutines; Close stops them and waits.
type Prober struct {
	redis    *target // nil without Redis
	backends []*target
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// target is one dependency and its latest verdict.
type target struct {
	name  string // for logs and reasons: "redis", "backend 10.0.0.5:8081"
	probe func(ctx context.Context) error
	last  atomic.Pointer[verdict]
}

type verdict struct{ err error }

// New starts one prober goroutine per dependency and returns once each has
// a first verdict (bounded by the probes' timeouts), so that the first
// /readyz answer is already a real one.
func New(o Options) (*Prober, error) {
	switch {
	case o.RedisTimeout <= 0:
		return nil, fmt.Errorf("probe: redis timeout %s must be positive", o.RedisTimeout)
	case o.BackendTimeout <= 0:
		return nil, fmt.Errorf("probe: backend timeout %s must be positive", o.BackendTimeout)
	case o.Interval <= 0:
		return nil, fmt.Errorf("probe: interval %s must be positive", o.Interval)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.OnChange == nil {
		log := o.Logger
		o.OnChange = func(dependency string, err error) {
			if err != nil {
				log.Warn("dependency unavailable", "dependency", dependency, "err", err)
				return
			}
			log.Info("dependency available again", "dependency", dependency)
		}
	}
	p := &Prober{}
	if o.Redis != nil {
		p.redis = &target{name: "redis", probe: pingRedis(o.Redis, o.RedisTimeout)}
	}
	for _, b := range o.Backends {
		u, err := url.Parse(b)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("probe: backend %q is not a URL", b)
		}
		p.backends = append(p.backends, &target{name: "backend " + u.Host,
			probe: askBackend(u, o.BackendTLS, o.InternalToken, o.BackendTimeout)})
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	var first sync.WaitGroup
	for _, t := range p.all() {
		t.last.Store(&verdict{err: ErrNotProbed})
		first.Add(1)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			t.run(ctx, o.Interval, o.OnChange, first.Done)
		}()
	}
	first.Wait()
	return p, nil
}

func (p *Prober) all() []*target {
	out := append([]*target(nil), p.backends...)
	if p.redis != nil {
		out = append(out, p.redis)
	}
	return out
}

// Redis is the latest Redis verdict: nil when it answered. Without Redis
// it is nil.
func (p *Prober) Redis() error {
	if p.redis == nil {
		return nil
	}
	return p.redis.last.Load().err
}

// Backend is the latest verdict of backend i (Options order).
func (p *Prober) Backend(i int) error { return p.backends[i].last.Load().err }

// Close stops the goroutines and waits for them: a PING in flight ends at
// once, a backend probe in flight within BackendTimeout.
func (p *Prober) Close() {
	p.cancel()
	p.wg.Wait()
}

// run probes t every interval until ctx ends; firstDone is called after the
// first verdict.
func (t *target) run(ctx context.Context, interval time.Duration, onChange func(string, error), firstDone func()) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for first := true; ; first = false {
		err := t.probe(ctx)
		if ctx.Err() != nil {
			if first {
				firstDone()
			}
			return
		}
		old := t.last.Swap(&verdict{err: err})
		switch {
		case err != nil && (old.err == nil || first):
			onChange(t.name, err)
		case err == nil && old.err != nil && !first:
			onChange(t.name, nil)
		}
		if first {
			firstDone()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// pingRedis PINGs the server, the current Sentinel master, or every
// Cluster master, within timeout.
func pingRedis(c redis.UniversalClient, timeout time.Duration) func(context.Context) error {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		var err error
		if cc, ok := c.(*redis.ClusterClient); ok {
			err = cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.Ping(ctx).Err() })
		} else {
			err = c.Ping(ctx).Err()
		}
		if err != nil {
			return fmt.Errorf("ping: %w", err)
		}
		return nil
	}
}

// askBackend asks one backend's internal readiness endpoint: ready is a
// 200, anything else (refused, timed out, 503 because its database is
// gone, 401 because the tokens differ) is not.
func askBackend(u *url.URL, tc *tls.Config, token string, timeout time.Duration) func(context.Context) error {
	hc := &fasthttp.HostClient{Addr: u.Host, IsTLS: u.Scheme == "https", TLSConfig: tc, MaxConns: 1,
		MaxIdleConnDuration: 10 * time.Second, NoDefaultUserAgentHeader: true}
	uri := u.Scheme + "://" + u.Host + wire.ReadyPath
	return func(context.Context) error {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI(uri)
		req.Header.Set(wire.HeaderInternalToken, token)
		if err := hc.DoTimeout(req, resp, timeout); err != nil {
			// A backend that refuses this gateway's client certificate
			// closes the connection; the client reports only that.
			if u.Scheme == "https" && errors.Is(err, fasthttp.ErrConnectionClosed) {
				if refusal := hoptls.Diagnose(u.Host, tc, timeout); refusal != nil {
					err = refusal
				}
			}
			return fmt.Errorf("%s: %w", u.Host, hoptls.Explain(err))
		}
		if resp.StatusCode() != fasthttp.StatusOK {
			return fmt.Errorf("%s: answered %d", u.Host, resp.StatusCode())
		}
		return nil
	}
}
