package edge

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"vendorgate/config"
	"vendorgate/gateway/connlimit"
	"vendorgate/shared/barelf"
	"vendorgate/shared/idleconn"
	"vendorgate/shared/serverlog"
	"vendorgate/shared/wire"
)

// Options is what New needs from the gateway: its settings, where to log
// and register metrics, and the handlers of the requests the listeners
// read. The handlers are the gateway's; the server only reads requests
// for them and writes their answers.
type Options struct {
	// Config is the validated configuration (config.Gateway): the
	// listeners' addresses, read_timeout, proxy.timeout (the write
	// timeout's base), proxy.stream_idle_timeout, the connection bounds,
	// keyless_idle_timeout, proxy_protocol, http_listen and tls.
	Config *config.Gateway
	// Logger receives the servers' and the TLS events' lines; Registry the
	// connection and TLS metrics.
	Logger   *slog.Logger
	Registry prometheus.Registerer
	// Now is the clock of certificate expiry.
	Now func() time.Time

	// Handler, ErrorHandler and HeaderReceived serve the public listener
	// (fasthttp.Server's fields of those names).
	Handler        fasthttp.RequestHandler
	ErrorHandler   func(*fasthttp.RequestCtx, error)
	HeaderReceived func(*fasthttp.RequestHeader) fasthttp.RequestConfig
	// Admin serves the admin listener.
	Admin fasthttp.RequestHandler
	// Plain and PlainError serve http_listen; unused without it.
	Plain      fasthttp.RequestHandler
	PlainError func(*fasthttp.RequestCtx, error)

	// Trusted reports whether a peer is a trusted proxy in force: its
	// connections are not bounded per peer, and with proxy_protocol they
	// begin with a PROXY header.
	Trusted func(netip.Addr) bool
	// Refusal writes the answer to a plain-HTTP connection over a per-peer
	// bound (connlimit.Options.Refusal); under TLS such a connection is
	// closed unanswered.
	Refusal func(dst []byte, over connlimit.Reason) []byte

	// onPoll, when set, runs after each look of the certificate watcher
	// (tests wait on it instead of on the clock).
	onPoll func()
}

// Server holds the gateway's listeners: the public one (plain HTTP or
// TLS), the admin one and the optional plain-HTTP one (http_listen), the
// per-peer and total connection bounds they share, and the certificates.
type Server struct {
	log *slog.Logger
	reg prometheus.Registerer

	public *fasthttp.Server
	admin  *fasthttp.Server
	plain  *fasthttp.Server // nil without http_listen

	readTimeout        time.Duration
	streamIdle         time.Duration // each write to a client progresses within it
	keylessIdle        time.Duration // keyless_idle_timeout (keyless.go)
	maxConnsPerPeer    int
	maxNewConnsPerPeer int
	// conns bounds the connections of the public listener and http_listen
	// together (max_conns).
	conns        *connlimit.Total
	connsRefused [connlimit.NumReasons]prometheus.Counter // by connlimit.Reason
	trusted      func(netip.Addr) bool
	refusal      func(dst []byte, over connlimit.Reason) []byte
	// proxyHeaders: connections from trusted proxies begin with a PROXY
	// header (proxy_protocol, proxyprotocol.go).
	proxyHeaders bool
	// tls serves the public listener over HTTPS (tls.go); plain HTTP when
	// its certs are nil.
	tls edgeTLS

	// served holds the listeners Serve was given, so that Shutdown closes
	// them even when it runs before Serve's goroutines registered them with
	// fasthttp; shut makes a Serve that comes after Shutdown return at once.
	servedMu sync.Mutex
	served   []net.Listener
	shut     bool
}

// New builds the servers and reads the certificates (it refuses to start
// on a file that cannot be read or a key that does not match), registers
// the connection and TLS metrics and starts the certificate watcher;
// Close stops it.
func New(o Options) (*Server, error) {
	c := o.Config
	switch {
	case c == nil:
		return nil, errors.New("edge: no configuration")
	case o.Logger == nil || o.Registry == nil || o.Now == nil:
		return nil, errors.New("edge: a logger, a metrics registry and a clock are needed")
	case o.Handler == nil || o.ErrorHandler == nil || o.HeaderReceived == nil || o.Admin == nil:
		return nil, errors.New("edge: the public handlers and the admin handler are needed")
	case c.HTTPListen != "" && (o.Plain == nil || o.PlainError == nil):
		return nil, errors.New("edge: http_listen is set without its handlers")
	case o.Trusted == nil || o.Refusal == nil:
		return nil, errors.New("edge: the trusted proxies and the refusal answer are needed")
	}
	s := &Server{log: o.Logger, reg: o.Registry, readTimeout: c.ReadTimeout, streamIdle: c.Proxy.StreamIdleTimeout,
		keylessIdle: c.KeylessIdleTimeout, maxConnsPerPeer: c.MaxConnsPerPeer, maxNewConnsPerPeer: c.MaxNewConnsPerPeer,
		trusted: o.Trusted, refusal: o.Refusal, proxyHeaders: c.ProxyProtocol}
	s.tls.onPoll = o.onPoll
	var err error
	if s.conns, err = connlimit.NewTotal(c.MaxConns); err != nil {
		return nil, fmt.Errorf("max_conns: %w", err)
	}
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vendorgate_gateway_connections_refused_total",
		Help: "Connections refused at accept, by reason: open (the peer held max_conns_per_peer already), rate (it had opened max_new_conns_per_peer in the last second), total (max_conns were open)."},
		[]string{"reason"})
	open := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "vendorgate_gateway_connections_open",
		Help: "Connections open on the public listener and http_listen together, against max_conns."},
		func() float64 { return float64(s.conns.Open()) })
	for r := range s.connsRefused {
		s.connsRefused[r] = refused.WithLabelValues(connlimit.Reason(r).String())
	}
	if err := s.reg.Register(refused); err != nil {
		return nil, err
	}
	if err := s.reg.Register(open); err != nil {
		return nil, err
	}
	if err := s.setupTLS(c.TLS, c.Listen, c.HTTPListen, c.PublicBaseURL, o.Now); err != nil {
		s.stopTLS() // what it had started
		return nil, err
	}
	// WriteTimeout bounds a whole answer; a streamed report lifts it and is
	// bounded by progress instead (Serve's idleconn listener, proxy.Forward).
	// HeaderReceived sets each request's body limit from its headers (the
	// server's MaxRequestBodySize is then only the ceiling); ReadTimeout
	// bounds the headers, and HeaderReceived an order's body again.
	s.public = &fasthttp.Server{
		Handler:                       o.Handler,
		ErrorHandler:                  o.ErrorHandler,
		HeaderReceived:                o.HeaderReceived,
		Name:                          "vendorgate",
		MaxRequestBodySize:            c.OrderBodyLimit(),
		ReadBufferSize:                wire.MaxRequestHead, // the one bound on a request's head: 431 past it
		ReadTimeout:                   c.ReadTimeout,
		WriteTimeout:                  c.Proxy.Timeout + writeSlack,
		IdleTimeout:                   idleTimeout,
		NoDefaultServerHeader:         true,
		DisableHeaderNamesNormalizing: false,
		// An idle keep-alive connection gives its read and write buffers
		// back to the pools (docs/tls.md: 46 KB against 140 KB a TLS
		// connection idle after GET /docs): max_conns is sized by it.
		ReduceMemoryUsage: true,
		CloseOnShutdown:   true,
		Logger:            serverlog.Printer{Log: s.log}, // never the request's bytes
	}
	s.admin = &fasthttp.Server{
		Handler:     o.Admin,
		Name:        "vendorgate-admin",
		IdleTimeout: adminIdleTimeout,
		ReadTimeout: adminReadTimeout,
		Logger:      serverlog.Printer{Log: s.log},
		// Its endpoints take no body (adminMaxBodyBytes says why).
		MaxRequestBodySize: adminMaxBodyBytes,
	}
	if c.HTTPListen != "" {
		s.plain = &fasthttp.Server{
			Handler:      o.Plain,
			ErrorHandler: o.PlainError,
			// No request here has a body worth reading: one is refused
			// unread (the error handler answers from its headers alone).
			HeaderReceived: func(*fasthttp.RequestHeader) fasthttp.RequestConfig {
				return fasthttp.RequestConfig{MaxRequestBodySize: NoBodyBytes}
			},
			Name:                  "vendorgate",
			ReadBufferSize:        wire.MaxRequestHead,
			ReadTimeout:           c.ReadTimeout,
			WriteTimeout:          c.ReadTimeout,
			IdleTimeout:           idleTimeout,
			ReduceMemoryUsage:     true, // idle connections give their buffers back (the public server)
			NoDefaultServerHeader: true,
			CloseOnShutdown:       true,
			Logger:                serverlog.Printer{Log: s.log},
		}
	}
	return s, nil
}

// NoBodyBytes is the body limit of every request but an order placement
// with a signed key. fasthttp reads a RequestConfig's 0 as "the server's
// limit", so the smallest limit it honours is one byte: no memory to
// speak of, and any announced body longer is refused unread.
const NoBodyBytes = 1

// Serve serves the public listener on pub and the admin endpoints on adm
// until Shutdown. It returns the first serving error.
func (s *Server) Serve(pub, adm net.Listener) error {
	if !s.register(pub, adm) {
		return nil
	}
	// Each peer holds at most max_conns_per_peer connections and opens at
	// most max_new_conns_per_peer a second (trusted proxies exempt); one
	// more is refused before fasthttp gives it a goroutine or a buffer (429,
	// or closed under TLS: publicListener).
	ln, err := s.publicListener(pub)
	if err != nil {
		_ = pub.Close()
		_ = adm.Close()
		return fmt.Errorf("serve: %w", err)
	}
	go func() {
		if err := s.admin.Serve(adm); err != nil {
			s.log.Error("admin listener stopped", "err", err)
		}
	}()
	return s.public.Serve(ln)
}

// ServePlain serves the plain-HTTP listener (http_listen) on ln until
// Shutdown; the same per-peer connection bounds and bare-LF guard as the
// public listener. Without http_listen it closes ln and returns an error.
func (s *Server) ServePlain(ln net.Listener) error {
	if s.plain == nil {
		_ = ln.Close()
		return errors.New("serve plain http: http_listen is not set")
	}
	if !s.register(ln) {
		return nil
	}
	bounded, err := connlimit.NewListener(ln, s.bounds())
	if err != nil {
		_ = ln.Close()
		return fmt.Errorf("serve plain http: %w", err)
	}
	return s.plain.Serve(&keylessListener{Listener: barelf.NewListener(bounded), idle: s.keylessIdle, readAhead: true}) // no key is ever served here
}

// register notes lns for Shutdown to close; after Shutdown it closes them
// and reports false.
func (s *Server) register(lns ...net.Listener) bool {
	s.servedMu.Lock()
	defer s.servedMu.Unlock()
	if s.shut {
		for _, ln := range lns {
			_ = ln.Close()
		}
		return false
	}
	s.served = append(s.served, lns...)
	return true
}

// bounds are the per-peer and total connection bounds of the public
// listener and http_listen.
func (s *Server) bounds() connlimit.Options {
	return connlimit.Options{Total: s.conns, PerPeer: s.maxConnsPerPeer, NewPerSecond: s.maxNewConnsPerPeer,
		Exempt: s.trusted, Header: s.connHeader(), Refusal: s.refusal, OnRefuse: s.onConnRefused,
		Linger: refusalLinger, MaxRefusing: maxRefusing}
}

// onConnRefused counts a connection refused at accept by the bound it was
// over.
func (s *Server) onConnRefused(over connlimit.Reason) { s.connsRefused[over].Inc() }

// publicListener wraps the public listener, in the order each guard needs:
// the per-peer bound at accept, before any handshake (under TLS a refused
// connection is closed unanswered: the client expects a handshake and
// cannot read a plaintext 429); the progress bound on the raw bytes
// (idleconn, which proxy.Forward's idleconn.Stream finds through the TLS
// connection); TLS; the bare-LF guard on the plaintext. Without TLS the
// order is the one plain HTTP always had, idleconn outermost. With
// proxy_protocol the PROXY header of a trusted proxy's connection is read
// by the per-peer bound at accept (connlimit.Options.Header), in a
// goroutine of the connection's own, never in the accept loop, and the
// bounds apply to the client it names (proxyprotocol.go).
func (s *Server) publicListener(pub net.Listener) (net.Listener, error) {
	o := s.bounds()
	if s.tls.certs != nil {
		o.Refusal = nil
	}
	bounded, err := connlimit.NewListener(pub, o)
	if err != nil {
		return nil, err
	}
	if s.tls.certs != nil {
		raw := idleconn.NewListener(bounded, idleconn.Options{Idle: s.streamIdle})
		if s.tls.acme != nil {
			// Orders begin once the listener is there to answer the
			// CA's TLS-ALPN-01 validation.
			if err := s.tls.acme.Manage(); err != nil {
				s.log.Error("acme: certificates not managed", "err", err)
			}
		}
		return NewListener(&keylessListener{Listener: raw, idle: s.keylessIdle}, s.tls.config, s.onHandshakeFailure).WithBudget(s.tls.budget, s.tls.overBudget.Inc), nil
	}
	return &keylessListener{Listener: idleconn.NewListener(barelf.NewListener(bounded), idleconn.Options{Idle: s.streamIdle}), idle: s.keylessIdle, readAhead: true}, nil
}

// Shutdown stops accepting and waits for the public listener's requests
// in flight until grace has passed (an error then), stops the plain and
// admin servers and closes every listener Serve and ServePlain were given.
// It does not stop the certificate watcher: Close does.
func (s *Server) Shutdown(grace time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- s.public.Shutdown() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(grace):
		err = errors.New("shutdown grace passed with requests in flight")
	}
	s.plainShutdown(time.Second) // it answers at once: nothing to wait for
	_ = s.admin.Shutdown()
	s.servedMu.Lock()
	s.shut = true
	for _, ln := range s.served {
		_ = ln.Close() // already closed by fasthttp unless Serve had not begun
	}
	s.servedMu.Unlock()
	return err
}

// plainShutdown stops the plain listener's server.
func (s *Server) plainShutdown(grace time.Duration) {
	if s.plain == nil {
		return
	}
	done := make(chan struct{})
	go func() { _ = s.plain.Shutdown(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
	}
}

// Close ends the certificate watcher and the ACME renewals.
func (s *Server) Close() { s.stopTLS() }
