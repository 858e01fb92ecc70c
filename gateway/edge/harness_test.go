package edge

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"vendorgate/config"
	"vendorgate/gateway/connlimit"
	"vendorgate/shared/testcert"
	"vendorgate/shared/testlog"
)

// The edge's tests start an edge server over real sockets with a small
// handler of their own in the gateway's place.

// tlsName is the name the test certificates are issued for.
const tlsName = "api.vendorgate.test"

// validKey is the X-API-Key the test handler takes as a valid key: it
// marks the connection as a vendor's (ShownKey).
const validKey = "valid-key"

// testEdge is an edge server serving HTTPS with a certificate from files
// in dir, issued by ca for tlsName and 127.0.0.1 (or plain HTTP when its
// configuration has no TLS), with the test handler.
type testEdge struct {
	s                 *Server
	reg               *prometheus.Registry
	ca                *testcert.CA
	dir               string
	certFile, keyFile string
	addr              string // the public listener's
	url               string // https://addr (http:// without TLS)
	logs              *testlog.Buffer
	// slow is how long a request to /slow takes in the handler.
	slow time.Duration
}

// edgeConfig is the configuration of a test edge: the defaults, with
// read_timeout and the new-connection bound out of the way of tests that
// do not set them.
func edgeConfig() *config.Gateway {
	c := config.DefaultGateway()
	c.Listen = "127.0.0.1:0"
	c.PublicBaseURL = "https://" + tlsName
	// Every test client is 127.0.0.1, and Go's client opens a connection
	// for each request past its two idle ones.
	c.MaxNewConnsPerPeer = 100000
	return c
}

// edgeOptions are a test edge's options but for its configuration.
type edgeOptions struct {
	plain  bool // no certificate: plain HTTP
	slow   time.Duration
	logger *slog.Logger // the JSON log into testEdge.logs when nil
	onPoll func()
	// wrap wraps the public listener's socket listener (nil: as it is).
	wrap func(net.Listener) net.Listener
}

// startEdge starts an edge with mod applied to its configuration.
func startEdge(t testing.TB, o edgeOptions, mod func(*config.Gateway)) *testEdge {
	t.Helper()
	e := &testEdge{ca: testcert.NewCA(t), dir: t.TempDir(), logs: &testlog.Buffer{}, slow: o.slow}
	c := edgeConfig()
	if !o.plain {
		e.certFile, e.keyFile = e.ca.Issue(t, time.Now().Add(90*24*time.Hour), tlsName, "127.0.0.1").Write(t, e.dir, "api")
		c.TLS.CertFile, c.TLS.KeyFile = e.certFile, e.keyFile
		c.TLS.WatchInterval = 0 // the tests that watch set it
	}
	if mod != nil {
		mod(c)
	}
	log := o.logger
	if log == nil {
		log = slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	s, reg, err := newTestServer(c, log, e.handle, o.onPoll)
	if err != nil {
		t.Fatal(err)
	}
	e.s, e.reg = s, reg
	pub, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	adm, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.addr = pub.Addr().String()
	if o.wrap != nil {
		pub = o.wrap(pub)
	}
	e.url = "https://" + e.addr
	if o.plain {
		e.url = "http://" + e.addr
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(pub, adm) }()
	t.Cleanup(func() {
		if err := s.Shutdown(5 * time.Second); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
		s.Close()
	})
	return e
}

// newTestServer is New with the test handlers; the trusted proxies are
// c.TrustedProxies (addresses or prefixes).
func newTestServer(c *config.Gateway, log *slog.Logger, h fasthttp.RequestHandler, onPoll func()) (*Server, *prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	s, err := New(Options{Config: c, Logger: log, Registry: reg, Now: time.Now,
		Handler: h,
		ErrorHandler: func(ctx *fasthttp.RequestCtx, err error) {
			ctx.Error("refused: "+err.Error(), fasthttp.StatusBadRequest)
		},
		HeaderReceived: func(*fasthttp.RequestHeader) fasthttp.RequestConfig { return fasthttp.RequestConfig{} },
		Admin:          func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("admin") },
		Trusted:        trusted(c.TrustedProxies),
		Refusal: func(dst []byte, over connlimit.Reason) []byte {
			return append(dst, "HTTP/1.1 429 Too Many Requests\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"...)
		},
		onPoll: onPoll})
	return s, reg, err
}

// trusted reports whether an address is in list, of addresses and
// prefixes.
func trusted(list config.List) func(netip.Addr) bool {
	var ps []netip.Prefix
	for _, s := range list {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a := netip.MustParseAddr(s)
			p = netip.PrefixFrom(a, a.BitLen())
		}
		ps = append(ps, p)
	}
	return func(a netip.Addr) bool {
		for _, p := range ps {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
}

// handle is the test handler: it answers 200 with the client's address,
// marks a connection that sent validKey as a vendor's, and takes e.slow
// on /slow (a request in flight across whatever the test does meanwhile).
func (e *testEdge) handle(ctx *fasthttp.RequestCtx) {
	if string(ctx.Request.Header.Peek("X-API-Key")) == validKey {
		ShownKey(ctx.Conn())
	}
	if string(ctx.Path()) == "/slow" {
		time.Sleep(e.slow)
	}
	ctx.SetBodyString("client " + ctx.RemoteAddr().String())
}

// metric is the value of the sample name (with its labels, as the text
// format writes them: `name{a="x",b="y"}`).
func (e *testEdge) metric(t testing.TB, name string) float64 {
	t.Helper()
	fams, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			sort.Strings(labels)
			id := f.GetName()
			if len(labels) > 0 {
				id += "{" + strings.Join(labels, ",") + "}"
			}
			if id != name {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no sample %s", name)
	return 0
}

// client is an HTTPS client that trusts the test CA and asks for tlsName.
func (e *testEdge) client() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: e.ca.ClientConfig(tlsName)}}
}

// handshake dials the edge and runs a handshake with cfg.
func (e *testEdge) handshake(cfg *tls.Config) (*tls.Conn, error) {
	c, err := net.DialTimeout("tcp", e.addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	tc := tls.Client(c, cfg)
	if err := tc.Handshake(); err != nil {
		c.Close()
		return nil, err
	}
	return tc, nil
}

// servedSerial is the serial number of the certificate a new handshake
// gets.
func (e *testEdge) servedSerial(t *testing.T) string {
	t.Helper()
	tc, err := e.handshake(e.ca.ClientConfig(tlsName))
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	return tc.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

// waitSerial waits until new handshakes get a certificate other than old.
func (e *testEdge) waitSerial(t *testing.T, old string) string {
	t.Helper()
	for i := 0; i < 200; i++ {
		if s := e.servedSerial(t); s != old {
			return s
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatalf("the certificate served is still %s", old)
	return ""
}

// answer is a response read off a raw connection.
type answer struct {
	status int
	body   []byte
}

// readAnswer reads one response from c within d.
func readAnswer(c net.Conn, d time.Duration) (answer, error) {
	_ = c.SetReadDeadline(time.Now().Add(d))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, body: body}, err
}

// isTimeout reports whether err is a deadline's.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
