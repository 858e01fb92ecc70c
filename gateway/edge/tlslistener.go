package edge

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"vendorgate/shared/barelf"
)

// Config is the public listener's TLS configuration, with certificates
// from s. TLS 1.2 at least, 1.3 preferred (Go negotiates the highest both
// sides speak). For 1.2 only ECDHE key exchange with AEAD ciphers (forward
// secrecy, no CBC): the suites a security review of a public API accepts
// today, and those every client of the last decade offers; 1.3's suites
// are all AEAD and not configurable. The curves are Go's defaults (the
// hybrid post-quantum X25519MLKEM768 first, then X25519, P-256, P-384).
// ALPN offers http/1.1 only: the server speaks no HTTP/2. Session
// tickets are on, with keys this process makes and rotates: a client
// resumes with the replica that issued its ticket, and does a full
// handshake with any other.
//
// With ACME, acme-tls/1 is offered too: a handshake that asks for it
// alone is the CA's TLS-ALPN-01 validation, answered with the challenge
// certificate, and the connection then closes.
func Config(s *Store) *tls.Config {
	protos := []string{"http/1.1"}
	if s.acme != nil {
		protos = append(protos, acmeTLS1)
	}
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: s.GetCertificate,
		NextProtos:     protos,
		CipherSuites: []uint16{
			tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
			tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
			tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
			tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
			tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
			tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
		},
	}
}

// Reason is why a handshake failed, a metric's label.
type Reason int

const (
	// VersionOrCipher: no TLS version, cipher suite or curve in common.
	VersionOrCipher Reason = iota
	// UnknownSNI: the client asked for a server name no certificate covers.
	UnknownSNI
	// BadCertificate: the client refused the certificate (unknown CA,
	// expired, wrong name).
	BadCertificate
	// Timeout: the handshake did not finish within read_timeout.
	Timeout
	// NotTLS: the first bytes were not a TLS handshake (plain HTTP sent
	// to the HTTPS port, a scanner).
	NotTLS
	// Closed: the client closed or reset the connection mid-handshake.
	Closed
	// Other: anything else (a malformed handshake message, an alert not
	// listed above).
	Other
	// ProxyHeader: with proxy_protocol, a trusted proxy's connection began
	// with no PROXY header or a malformed one, or sent none within
	// read_timeout; the handshake was never begun.
	ProxyHeader
	// NumReasons is the number of reasons, for arrays indexed by Reason.
	NumReasons
)

var reasonNames = [NumReasons]string{"version_or_cipher", "unknown_sni", "bad_certificate", "timeout", "not_tls", "closed", "other", "proxy_header"}

func (r Reason) String() string { return reasonNames[r] }

// Reasons is every Reason, to initialise a metric's label values.
func Reasons() []Reason {
	out := make([]Reason, NumReasons)
	for i := range out {
		out[i] = Reason(i)
	}
	return out
}

// Classify names the reason of a failed server handshake. crypto/tls
// returns most of these as plain errors, so the text is matched; the tests
// fail if a Go release changes it.
func Classify(err error) Reason {
	var ne net.Error
	var rh tls.RecordHeaderError
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return Timeout
	case errors.As(err, &rh):
		return NotTLS
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, net.ErrClosed):
		return Closed
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "no certificates configured"): // GetCertificate found none for the name
		return UnknownSNI
	case strings.Contains(msg, "unsupported versions") || strings.Contains(msg, "no cipher suite") ||
		strings.Contains(msg, "no ECDHE curve") || strings.Contains(msg, "protocol version") ||
		strings.Contains(msg, "insufficient security") || strings.Contains(msg, "handshake failure"):
		return VersionOrCipher
	case strings.Contains(msg, "remote error: tls: ") && strings.Contains(msg, "certificate"):
		return BadCertificate
	}
	return Other
}

// Listener serves TLS over the connections of its inner listener (which
// sees raw bytes: the per-peer bound at accept, the progress bound on
// writes), with the bare-LF guard over the plaintext. Its connections
// offer Handshake and ConnectionState, so that fasthttp sees TLS (IsTLS,
// TLSConnectionState) and runs the handshake under its read timeout.
type Listener struct {
	net.Listener
	config *tls.Config
	onFail func(Reason)
	budget *Budget
	onOver func()
	// places are the raw connections whose handshake is under way, each
	// with its place in the budget: asked for when the ClientHello
	// arrives, held until the handshake ends.
	places sync.Map // net.Conn → *place
}

// NewListener wraps ln; onFail is called once for each failed handshake.
func NewListener(ln net.Listener, config *tls.Config, onFail func(Reason)) *Listener {
	if onFail == nil {
		onFail = func(Reason) {}
	}
	return &Listener{Listener: ln, config: config, onFail: onFail, onOver: func() {}}
}

// WithBudget bounds the listener's handshakes across all peers by b;
// onOver is called for each handshake that failed for want of room (not
// counted by onFail). Call it before serving.
func (l *Listener) WithBudget(b *Budget, onOver func()) *Listener {
	l.budget, l.onOver = b, onOver
	l.config = l.config.Clone()
	l.config.GetConfigForClient = l.admit
	return l
}

// admit takes a place in the budget once a ClientHello has arrived, so
// that a client that never sends one holds none. The CA's TLS-ALPN-01
// validation is not held back.
func (l *Listener) admit(hello *tls.ClientHelloInfo) (*tls.Config, error) {
	if IsChallenge(hello) {
		return nil, nil
	}
	v, ok := l.places.Load(hello.Conn)
	if !ok { // not begun by Conn.Handshake: no deadline to wait against
		return nil, ErrOverBudget
	}
	p := v.(*place)
	if err := l.budget.acquire(p.until); err != nil {
		return nil, err
	}
	p.taken = true
	return nil, nil // the listener's configuration
}

// Accept wraps the next connection; its handshake runs on first use.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := tls.Server(c, l.config)
	return &Conn{Conn: barelf.New(tc), tc: tc, raw: c, l: l}, nil
}

// Conn is a served TLS connection: reads and writes go through the bare-LF
// guard to the TLS connection. After a failed handshake it reads as closed
// (io.EOF): the failure is counted once, and the server neither answers
// the client in plaintext nor logs the connection.
type Conn struct {
	*barelf.Conn
	tc  *tls.Conn
	raw net.Conn // under tc: the key of the listener's budget places
	l   *Listener
	// state: 0 before the handshake, 1 done, 2 failed. Only the serving
	// goroutine reads and hands-shakes.
	state uint8
}

// Handshake runs the TLS handshake once; a failure is counted by reason.
func (c *Conn) Handshake() error {
	switch c.state {
	case 1:
		return nil
	case 2:
		return io.EOF
	}
	if c.l.budget != nil {
		c.l.places.Store(c.raw, &place{until: time.Now().Add(c.l.budget.wait)})
	}
	err := c.tc.Handshake()
	if c.l.budget != nil {
		if v, ok := c.l.places.LoadAndDelete(c.raw); ok && v.(*place).taken {
			c.l.budget.release()
		}
	}
	if err != nil {
		c.state = 2
		if errors.Is(err, ErrOverBudget) {
			c.l.onOver()
		} else {
			c.l.onFail(Classify(err))
		}
		return err
	}
	c.state = 1
	return nil
}

// place is one handshake's claim on the budget: until is when its wait
// for room ends, taken whether it holds a place. Only the handshake's own
// goroutine writes it.
type place struct {
	until time.Time
	taken bool
}

// Read reads plaintext, after the handshake.
func (c *Conn) Read(p []byte) (int, error) {
	if c.state != 1 && c.Handshake() != nil {
		return 0, io.EOF
	}
	return c.Conn.Read(p)
}

// ConnectionState is the TLS connection's.
func (c *Conn) ConnectionState() tls.ConnectionState { return c.tc.ConnectionState() }

// NetConn is the TLS connection, for code that looks for a wrapper further
// down (idleconn.Stream).
func (c *Conn) NetConn() net.Conn { return c.tc }
