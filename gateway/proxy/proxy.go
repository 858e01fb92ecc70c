// Package proxy forwards an admitted request to a backend: two bounded
// fasthttp HostClients per backend (report downloads on a pool of their
// own), each backend behind its own gobreaker breaker; a
// backend whose breaker is open is skipped while another is healthy. The
// gateway's identity headers replace any copy the client sent, hop-by-hop
// headers are stripped both ways, report bodies stream (PDFs, at no less
// than a minimum rate) while the API's JSON answers are read whole, and a
// backend error that is not the API's envelope is wrapped in it.
package proxy

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
	"github.com/valyala/fasthttp"

	"vendorgate/gateway/breaker"
	"vendorgate/shared/apierr"
	"vendorgate/shared/hoptls"
	"vendorgate/shared/idleconn"
)

// Outcomes callers map to answers.
var (
	// ErrUnavailable: the backend refused the connection, failed, or every
	// backend's breaker is open (503 request_failed).
	ErrUnavailable = errors.New("backend unavailable")
	// ErrTimeout: the backend did not answer in time (504 request_failed).
	ErrTimeout = errors.New("backend timed out")
)

// Options configures a Proxy. Every duration and count it uses is required
// (config holds the settings' defaults): New refuses a zero.
type Options struct {
	// Backends are base URLs (http://host:port).
	Backends []string
	// InternalToken is sent as X-Internal-Token on every call.
	InternalToken string
	// TLS is the client configuration of https backends (their CA, a
	// client certificate), both pools alike; nil: the system's roots.
	TLS *tls.Config
	// Timeout bounds one call, headers and body; for a streamed call, the
	// wait for its answer to begin.
	Timeout time.Duration
	// StreamIdleTimeout bounds a streamed body by progress: each pause in
	// the backend's sending may last this long, the whole body as long as
	// bytes keep moving.
	StreamIdleTimeout time.Duration
	// MaxConns bounds the connections to each backend; past it a request
	// waits up to MaxConnWait.
	MaxConns int
	// StreamMaxConns bounds the connections to each backend that streamed
	// calls (report downloads) use, a pool apart from MaxConns: streams
	// held open, however many, never take the connection a read or an
	// order needs.
	StreamMaxConns int
	// MinRate is the floor of a streamed body's progress, enforced where
	// the client's connection is bounded by progress (idleconn): below it
	// the stream is cut. Zero Bytes is off; with Bytes, Window is
	// required.
	MinRate MinRate
	// OnTooSlow is told of each stream cut for its rate; nil: nothing is.
	OnTooSlow func()
	// MaxConnWait is how long a request waits for a free connection:
	// short, as a full pool is overload, answered 503 quickly.
	MaxConnWait time.Duration
	// BreakerOpenFor is how long a breaker stays open.
	BreakerOpenFor time.Duration
	// BreakerFailures is how many consecutive failures open it.
	BreakerFailures int
	// OnStateChange is told of breaker transitions (under the breaker lock).
	OnStateChange func(name string, from, to gobreaker.State)
	// ObserveUpstream is told each call's backend index and duration.
	ObserveUpstream func(backend int, d time.Duration)
}

// Identity is what the gateway asserts to the backend about a request.
type Identity struct {
	VendorID    string
	KeyID       string
	Environment string
	RequestID   []byte
	ClientIP    []byte
	// KeepTraceContext passes the request's W3C traceparent and tracestate
	// on as they are: the gateway's own span's, or a trusted proxy's.
	// Without it, a caller's traceparent goes on with its sampled flag
	// cleared and its tracestate removed: the backend follows the trace
	// context it is sent, and the caller's decision is not the gateway's.
	KeepTraceContext bool
}

// Proxy forwards requests.
type Proxy struct {
	backends   []*backend
	next       atomic.Uint32
	token      []byte // X-Internal-Token's value
	timeout    time.Duration
	observe    func(int, time.Duration)
	minRate    MinRate
	streamIdle time.Duration
	onTooSlow  func()
	bodies     sync.Pool // *streamBody
}

type backend struct {
	name    string // host:port
	scheme  string // http or https
	hc      *fasthttp.HostClient
	streams *fasthttp.HostClient // streamed calls: a pool of their own
	cb      *gobreaker.CircuitBreaker[struct{}]
}

// New returns a Proxy.
func New(o Options) (*Proxy, error) {
	if len(o.Backends) == 0 {
		return nil, errors.New("proxy: no backend")
	}
	switch {
	case o.Timeout <= 0:
		return nil, fmt.Errorf("proxy: timeout %s must be positive", o.Timeout)
	case o.StreamIdleTimeout <= 0:
		return nil, fmt.Errorf("proxy: stream idle timeout %s must be positive", o.StreamIdleTimeout)
	case o.MaxConns <= 0:
		return nil, fmt.Errorf("proxy: max conns %d must be positive", o.MaxConns)
	case o.StreamMaxConns <= 0:
		return nil, fmt.Errorf("proxy: stream max conns %d must be positive", o.StreamMaxConns)
	case o.MinRate.Bytes > 0 && o.MinRate.Window <= 0:
		return nil, fmt.Errorf("proxy: min rate window %s must be positive with a minimum rate", o.MinRate.Window)
	case o.MaxConnWait <= 0:
		return nil, fmt.Errorf("proxy: max conn wait %s must be positive", o.MaxConnWait)
	case o.BreakerOpenFor <= 0:
		return nil, fmt.Errorf("proxy: breaker open for %s must be positive", o.BreakerOpenFor)
	case o.BreakerFailures <= 0:
		return nil, fmt.Errorf("proxy: breaker failures %d must be positive", o.BreakerFailures)
	}
	if o.OnTooSlow == nil {
		o.OnTooSlow = func() {}
	}
	if o.ObserveUpstream == nil {
		o.ObserveUpstream = func(int, time.Duration) {}
	}
	p := &Proxy{token: []byte(o.InternalToken), timeout: o.Timeout, observe: o.ObserveUpstream,
		minRate: o.MinRate, streamIdle: o.StreamIdleTimeout, onTooSlow: o.OnTooSlow}
	// Every backend connection is an idleconn.Conn: a buffered call's
	// DoTimeout deadline stands over headers and body, while a streamed
	// call, made without one, waits up to Timeout for its answer to begin
	// and then up to StreamIdleTimeout for each further byte.
	progress := idleconn.Options{Idle: o.StreamIdleTimeout, FirstByte: o.Timeout}
	dial := func(addr string, timeout time.Duration) (net.Conn, error) {
		if timeout <= 0 {
			timeout = o.Timeout // a streamed call has no request timeout
		}
		c, err := fasthttp.DialTimeout(addr, timeout)
		if err != nil {
			return nil, err
		}
		return idleconn.New(c, progress), nil
	}
	for _, b := range o.Backends {
		u, err := url.Parse(b)
		if err != nil || u.Host == "" || u.Scheme != "http" && u.Scheme != "https" {
			return nil, fmt.Errorf("proxy: backend %q is not an http URL", b)
		}
		be := &backend{
			name:    u.Host,
			scheme:  u.Scheme,
			hc:      hostClient(u, o.TLS, o.MaxConns, o.MaxConnWait, o.Timeout, dial),
			streams: hostClient(u, o.TLS, o.StreamMaxConns, o.MaxConnWait, o.Timeout, dial),
		}
		if be.cb, err = breaker.New[struct{}](breaker.Settings{Name: "backend:" + u.Host, Failures: o.BreakerFailures,
			OpenFor: o.BreakerOpenFor, OnStateChange: o.OnStateChange, CloseIdle: func() { be.closeIdle() }}); err != nil {
			return nil, fmt.Errorf("proxy: %w", err)
		}
		p.backends = append(p.backends, be)
	}
	return p, nil
}

// hostClient is one pool of connections to the backend at u.
func hostClient(u *url.URL, tc *tls.Config, maxConns int, wait, timeout time.Duration, dial fasthttp.DialFuncWithTimeout) *fasthttp.HostClient {
	return &fasthttp.HostClient{
		Addr:                          u.Host,
		IsTLS:                         u.Scheme == "https",
		TLSConfig:                     tc,
		MaxConns:                      maxConns,
		MaxConnWaitTimeout:            wait,
		MaxIdemponentCallAttempts:     1, // the breaker decides, never a silent retry
		NoDefaultUserAgentHeader:      true,
		DisableHeaderNamesNormalizing: false,
		DisablePathNormalizing:        true,
		// Streaming is chosen per call (Forward's stream): a streamed
		// response costs four allocations and holds the backend
		// connection until the client has the body, which a small JSON
		// answer does not need. Buffered answers are bounded by the API
		// (an order list is at most 200 orders), so no size limit here.
		StreamResponseBody: false,
		// No ReadTimeout: it would bound a streamed body as a whole.
		// A buffered call's DoTimeout sets the same bound per call.
		DialTimeout:         dial,
		WriteTimeout:        timeout,
		MaxIdleConnDuration: 30 * time.Second,
	}
}

// closeIdle closes both pools' idle connections.
func (b *backend) closeIdle() {
	b.hc.CloseIdleConnections()
	b.streams.CloseIdleConnections()
}

// aim points uri at b whatever form the client's request target took:
// only its path and query are the client's to choose. A target in absolute
// form (RFC 9112 3.2.2: a server accepts it) names a scheme, host and user
// info of the client's choosing; HostClient would refuse an https one before
// sending anything (fasthttp.ErrHostClientRedirectToDifferentScheme),
// counted against the backend's breaker, so that one vendor's five requests
// opened it for every vendor; it would also write the named host as Host and
// the user info as an Authorization header. An HTTP/1.0 request without
// Host gets the backend's.
func (b *backend) aim(uri *fasthttp.URI) {
	uri.SetScheme(b.scheme)
	uri.SetHost(b.name)
	if len(uri.Username()) > 0 || len(uri.Password()) > 0 {
		uri.SetUsername("")
		uri.SetPassword("")
	}
}

// Breakers lists each backend's breaker name and current state (reading
// the state moves an open breaker whose time is up to half-open).
func (p *Proxy) Breakers(fn func(name string, s gobreaker.State)) {
	for _, b := range p.backends {
		fn(b.cb.Name(), b.cb.State())
	}
}

// BackendNames are the backends' names in Options order (metric labels).
func (p *Proxy) BackendNames() []string {
	out := make([]string, len(p.backends))
	for i, b := range p.backends {
		out[i] = b.name
	}
	return out
}

// Close closes idle connections.
func (p *Proxy) Close() {
	for _, b := range p.backends {
		b.closeIdle()
	}
}

// pick returns the next backend in turn whose breaker is not open; when all
// are open, the next in turn (its breaker answers ErrOpenState at once).
func (p *Proxy) pick() (int, *backend) {
	n := len(p.backends)
	if n == 1 {
		return 0, p.backends[0] // no other to prefer: skip the breaker's lock and clock
	}
	start := int(p.next.Add(1) % uint32(n))
	for i := 0; i < n; i++ {
		j := (start + i) % n
		if p.backends[j].cb.State() != gobreaker.StateOpen {
			return j, p.backends[j]
		}
	}
	return start, p.backends[start]
}

// Forward sends ctx's request to a backend and leaves the answer in
// ctx.Response: with stream, the body still streaming from the backend
// (report files of any size) over the backend's stream pool; without,
// read whole. An error means nothing usable came back; an *apierr.Error is
// a backend error answer that was not in the envelope's shape and must be
// written instead. upstream is the backend call's time, as ObserveUpstream
// was told (for the access log: the one measurement serves both).
//
// When a body streams, *hold (when hold is not nil) passes to the stream:
// Forward sets *hold to nil, and the stream releases it once, when the body
// ends (written whole, cut, or dropped with the response). Otherwise *hold
// stays the caller's to release.
func (p *Proxy) Forward(ctx *fasthttp.RequestCtx, id *Identity, stream bool, hold *Hold) (upstream time.Duration, err error) {
	req := &ctx.Request
	closeAfter := req.Header.ConnectionClose()
	prepareRequest(&req.Header, id, p.token)
	i, b := p.pick()
	b.aim(req.URI())
	resp, hc := &ctx.Response, b.hc
	var s *streamBody
	if stream {
		// The backend's answer is read into a response of its own, whose
		// body the client's then streams from (streamBody): fasthttp
		// cannot wrap a response's body stream without closing it.
		s = p.getBody()
		resp, hc = &s.resp, b.streams
		resp.StreamBody = true
	}
	start := time.Now()
	_, err = b.cb.Execute(func() (struct{}, error) {
		if stream { // bounded by progress on the connection (see New)
			return struct{}{}, hc.Do(req, resp)
		}
		return struct{}{}, hc.DoTimeout(req, resp, p.timeout)
	})
	upstream = time.Since(start)
	p.observe(i, upstream)
	if closeAfter {
		req.Header.SetConnectionClose()
	}
	if err != nil {
		if s != nil {
			p.putBody(s)
		}
		ctx.Response.Reset()
		switch {
		case errors.Is(err, fasthttp.ErrTimeout):
			return upstream, fmt.Errorf("%w: %s: %w", ErrTimeout, b.name, err)
		default:
			return upstream, fmt.Errorf("%w: %s: %w", ErrUnavailable, b.name, hoptls.Explain(err))
		}
	}
	if stream {
		return upstream, p.streamTo(ctx, s, hold)
	}
	stripResponse(&ctx.Response.Header)
	if ctx.Response.StatusCode() >= 400 {
		return upstream, checkEnvelope(&ctx.Response)
	}
	return upstream, nil
}

// streamTo gives the client the backend's answer in s: its head, then its
// body streamed (holding *hold until it ends), or an error's body read
// whole.
func (p *Proxy) streamTo(ctx *fasthttp.RequestCtx, s *streamBody, hold *Hold) error {
	out := &ctx.Response
	s.resp.Header.CopyTo(&out.Header)
	stripResponse(&out.Header)
	if out.StatusCode() >= 400 {
		out.SetBody(s.resp.Body()) // reads the stream: error bodies are small
		p.putBody(s)
		return checkEnvelope(out)
	}
	s.body = s.resp.BodyStream()
	// The server's write deadline bounds the whole answer; a client on a
	// slow link may take longer for a large file. Each write is bounded by
	// progress instead, when the gateway's listener wraps connections in
	// idleconn, and the stream by its minimum rate; a failed body makes the
	// server close the connection short of Content-Length (or of the last
	// chunk), never end cleanly.
	if idleconn.Stream(ctx) && p.minRate.Bytes > 0 {
		s.pace(ctx, p.minRate, p.streamIdle, time.Now)
	}
	if hold != nil { // last: from here the response owns s, and s the slot
		s.hold, *hold = *hold, nil
	}
	out.SetBodyStream(s, s.resp.Header.ContentLength())
	return nil
}

// maxErrorBody bounds how much of a backend error body is read to check it.
const maxErrorBody = 64 << 10

// checkEnvelope reads a backend error body; when it is not the envelope it
// returns the envelope to write instead, chosen by the backend's status.
func checkEnvelope(resp *fasthttp.Response) error {
	body := resp.Body() // reads the stream: error bodies are small
	if len(body) <= maxErrorBody {
		if _, ok := apierr.Parse(body); ok {
			return nil
		}
	}
	status := resp.StatusCode()
	e := &apierr.Error{Code: apierr.RequestFailed, Message: "the service answered an error", HTTPStatus: status}
	switch status {
	case fasthttp.StatusNotFound:
		e = &apierr.Error{Code: apierr.NotFound, Message: "not found"}
	case fasthttp.StatusMethodNotAllowed:
		e = &apierr.Error{Code: apierr.MethodNotAllowed, Message: "method not allowed"}
	case fasthttp.StatusRequestEntityTooLarge:
		e = &apierr.Error{Code: apierr.PayloadTooLarge, Message: "the request body is too large"}
	case fasthttp.StatusUnsupportedMediaType:
		e = &apierr.Error{Code: apierr.UnsupportedMediaType, Message: "unsupported media type"}
	case fasthttp.StatusInternalServerError:
		e = &apierr.Error{Code: apierr.InternalError, Message: "internal error"}
	}
	return e
}
