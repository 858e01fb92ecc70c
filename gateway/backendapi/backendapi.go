// Package backendapi calls the backend's internal key lookup, behind its own
// circuit breaker so that a dead backend costs a failed lookup no timeout.
package backendapi

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
	"github.com/valyala/fasthttp"

	"vendorgate/gateway/breaker"
	"vendorgate/shared/hoptls"
	"vendorgate/shared/logctx"
	"vendorgate/shared/tracing"
	"vendorgate/shared/wire"
)

// ErrUnavailable means the lookup could not be made: backend refused, timed
// out, answered an unexpected status, or the breaker is open.
var ErrUnavailable = errors.New("key lookup unavailable")

// BreakerName is the name of the lookup breaker in metrics.
const BreakerName = "key_lookup"

// Options configures a Client. Every duration and count it uses is
// required: New refuses a zero.
type Options struct {
	// Backends are base URLs (http://host:port); lookups rotate over them.
	Backends []string
	// InternalToken is sent as X-Internal-Token.
	InternalToken string
	// TLS is the client configuration of https backends (their CA, a
	// client certificate); nil: the system's roots.
	TLS *tls.Config
	// Timeout bounds one lookup.
	Timeout time.Duration
	// MaxConns bounds connections per backend.
	MaxConns int
	// BreakerOpenFor is how long the breaker stays open.
	BreakerOpenFor time.Duration
	// BreakerFailures is how many consecutive failures open it.
	BreakerFailures int
	// OnStateChange is told of breaker transitions; it runs under the
	// breaker's lock.
	OnStateChange func(name string, from, to gobreaker.State)
}

// Client looks keys up.
type Client struct {
	hosts   []*fasthttp.HostClient
	next    atomic.Uint32
	token   string
	timeout time.Duration
	cb      *gobreaker.CircuitBreaker[*wire.KeyResolution]
}

// New returns a Client.
func New(o Options) (*Client, error) {
	if len(o.Backends) == 0 {
		return nil, errors.New("backendapi: no backend")
	}
	switch {
	case o.Timeout <= 0:
		return nil, fmt.Errorf("backendapi: timeout %s must be positive", o.Timeout)
	case o.MaxConns <= 0:
		return nil, fmt.Errorf("backendapi: max conns %d must be positive", o.MaxConns)
	case o.BreakerOpenFor <= 0:
		return nil, fmt.Errorf("backendapi: breaker open for %s must be positive", o.BreakerOpenFor)
	case o.BreakerFailures <= 0:
		return nil, fmt.Errorf("backendapi: breaker failures %d must be positive", o.BreakerFailures)
	}
	c := &Client{token: o.InternalToken, timeout: o.Timeout}
	for _, b := range o.Backends {
		u, err := url.Parse(b)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("backendapi: backend %q is not a URL", b)
		}
		c.hosts = append(c.hosts, &fasthttp.HostClient{
			Addr:      u.Host,
			IsTLS:     u.Scheme == "https",
			TLSConfig: o.TLS,
			MaxConns:  o.MaxConns,
			// A burst of lookups (many new keys at once) waits briefly for a
			// connection instead of failing at once.
			MaxConnWaitTimeout:        min(o.Timeout, 500*time.Millisecond),
			MaxIdemponentCallAttempts: 1,
			NoDefaultUserAgentHeader:  true,
			ReadTimeout:               o.Timeout,
			WriteTimeout:              o.Timeout,
			MaxResponseBodySize:       1 << 20,
		})
	}
	// Opening or going half-open drops the idle connections first, so the
	// half-open probe dials afresh (breaker.Settings.CloseIdle).
	cb, err := breaker.New[*wire.KeyResolution](breaker.Settings{Name: BreakerName, Failures: o.BreakerFailures,
		OpenFor: o.BreakerOpenFor, OnStateChange: o.OnStateChange, CloseIdle: func() {
			for _, hc := range c.hosts {
				hc.CloseIdleConnections()
			}
		}})
	if err != nil {
		return nil, fmt.Errorf("backendapi: %w", err)
	}
	c.cb = cb
	return c, nil
}

// State is the breaker's state (and moves open to half-open when due).
func (c *Client) State() gobreaker.State { return c.cb.State() }

// Lookup resolves a key hash. nil, nil: no key has that hash. The request
// id and the trace span ctx carries are sent with the call (X-Request-Id,
// traceparent), so the backend logs and traces the lookup under them.
func (c *Client) Lookup(ctx context.Context, keyHash string) (*wire.KeyResolution, error) {
	res, err := c.cb.Execute(func() (*wire.KeyResolution, error) { return c.do(ctx, keyHash) })
	if err != nil {
		if errors.Is(err, ErrUnavailable) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return res, nil
}

func (c *Client) do(ctx context.Context, keyHash string) (*wire.KeyResolution, error) {
	hc := c.hosts[int(c.next.Add(1))%len(c.hosts)]
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	scheme := "http://"
	if hc.IsTLS {
		scheme = "https://"
	}
	req.SetRequestURI(scheme + hc.Addr + wire.KeyLookupPath + keyHash)
	req.Header.Set(wire.HeaderInternalToken, c.token)
	req.Header.Set(fasthttp.HeaderAccept, "application/json")
	// The request that waits on the lookup: its id and its trace, so that
	// the backend's line and span of the lookup are found under them.
	if rid := logctx.RequestID(ctx); rid != "" {
		req.Header.Set(wire.HeaderRequestID, rid)
	}
	tracing.Propagator.Inject(ctx, tracing.Carrier{H: &req.Header})
	if err := hc.DoTimeout(req, resp, c.timeout); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, hoptls.Explain(err))
	}
	switch resp.StatusCode() {
	case fasthttp.StatusOK:
		var kr wire.KeyResolution
		if err := json.Unmarshal(resp.Body(), &kr); err != nil {
			return nil, fmt.Errorf("%w: key lookup answer: %w", ErrUnavailable, err)
		}
		if kr.KeyID == "" || kr.VendorID == "" {
			return nil, fmt.Errorf("%w: key lookup answer without key or vendor id", ErrUnavailable)
		}
		return &kr, nil
	case fasthttp.StatusNotFound:
		return nil, nil
	default:
		return nil, fmt.Errorf("%w: key lookup answered %d", ErrUnavailable, resp.StatusCode())
	}
}
