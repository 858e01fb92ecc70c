package edge

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/pires/go-proxyproto"
)

// With proxy_protocol on, a connection from a trusted proxy must begin
// with a PROXY header (v1 or v2), read at accept (connlimit.Options.Header,
// in a goroutine of the connection's own, under read_timeout), before the
// per-peer bounds and the TLS handshake. The client address it names
// becomes the connection's RemoteAddr: the address the per-peer bounds
// count, and the client every later step reads (the failed-key throttle,
// the documentation limit, the access log, X-Forwarded-For to the
// backend). A header that names no client (v1 UNKNOWN, v2 LOCAL, a v2
// AF_UNIX source, a source that is itself a trusted proxy) is the
// balancer's own connection: its address stays the balancer's, bounded
// and throttled as such. A connection from any other peer is not read for
// a header (a client cannot claim another address with one). With the
// PROXY protocol on, the gateway believes no X-Forwarded-For (its
// settings.go): it would be written by the client, inside its own stream.
//
// A header may arrive in several TCP segments: it is read until complete
// within read_timeout, as HAProxy and nginx read theirs. A malformed or
// missing header closes the connection, counted as a handshake failure
// proxy_header (TLS) and logged at DEBUG.

// errProxyHeader wraps every failure to read a PROXY header.
var errProxyHeader = errors.New("proxy header")

// v1Max is the longest v1 header, CRLF included (the protocol's bound);
// v2Fixed the fixed part of a v2 header, before its address block.
const (
	v1Max   = 107
	v2Fixed = 16
)

// connHeader is the connlimit.Options.Header of the public listener and
// http_listen when proxy_protocol is on; nil otherwise.
func (s *Server) connHeader() func(net.Conn) (net.Conn, error) {
	if !s.proxyHeaders {
		return nil
	}
	return s.readProxyHeader
}

// readProxyHeader reads c's PROXY header and returns c as from the client
// it names.
func (s *Server) readProxyHeader(c net.Conn) (net.Conn, error) {
	pc, err := readProxyHeader(c, s.readTimeout, s.trusted)
	if err != nil {
		if s.tls.certs != nil {
			s.onHandshakeFailure(ProxyHeader)
		}
		s.log.Debug("proxy header refused", "peer", c.RemoteAddr().String(), "err", err)
		return nil, err
	}
	return pc, nil
}

// readProxyHeader reads c's header within timeout. trusted reports whether
// an address is a trusted proxy: a source that is one names no client.
func readProxyHeader(c net.Conn, timeout time.Duration, trusted func(netip.Addr) bool) (net.Conn, error) {
	if err := c.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return nil, fmt.Errorf("%w: %w", errProxyHeader, err)
	}
	head, rest, err := readHeaderBytes(c)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errProxyHeader, err)
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		return nil, fmt.Errorf("%w: %w", errProxyHeader, err)
	}
	h, err := proxyproto.Read(bufio.NewReaderSize(bytes.NewReader(head), len(head)))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errProxyHeader, err)
	}
	pc := &proxiedConn{Conn: c, rest: rest, remote: c.RemoteAddr()}
	if h.Command.IsProxy() {
		if src, _, ok := h.TCPAddrs(); ok {
			if a := src.AddrPort().Addr().Unmap(); !trusted(a) {
				pc.remote = net.TCPAddrFromAddrPort(src.AddrPort())
			}
		}
	}
	return pc, nil
}

// readHeaderBytes reads one whole header from r, however it is split into
// segments, and returns it with whatever followed it in the last read (the
// client's first bytes, to be read before the connection's).
func readHeaderBytes(r io.Reader) (head, rest []byte, err error) {
	buf := make([]byte, 0, 256)
	need := len(proxyproto.SIGV2) // enough to tell v1 from v2
	for {
		for len(buf) < need {
			if cap(buf) < need {
				buf = append(make([]byte, 0, max(need, 2*cap(buf))), buf...)
			}
			n, err := r.Read(buf[len(buf):cap(buf)])
			buf = buf[:len(buf)+n]
			if err != nil && len(buf) < need {
				return nil, nil, err
			}
		}
		switch {
		case bytes.HasPrefix(buf, []byte("PROXY ")):
			if i := v1End(buf); i > 0 {
				return buf[:i], buf[i:], nil
			}
			if len(buf) >= v1Max {
				return nil, nil, errors.New("v1 header longer than 107 bytes")
			}
			need = len(buf) + 1
		case bytes.HasPrefix(buf, proxyproto.SIGV2):
			if len(buf) < v2Fixed {
				need = v2Fixed
				continue
			}
			n := int(binary.BigEndian.Uint16(buf[14:16]))
			if n > int(proxyproto.MaxV2HeaderSize) {
				return nil, nil, fmt.Errorf("v2 header of %d bytes", n)
			}
			if len(buf) >= v2Fixed+n {
				return buf[:v2Fixed+n], buf[v2Fixed+n:], nil
			}
			need = v2Fixed + n
		default:
			return nil, nil, errors.New("no PROXY header")
		}
	}
}

// v1End is the length of the v1 header line at the start of b (through its
// LF), or 0 if b holds no LF within the header's bound.
func v1End(b []byte) int {
	if i := bytes.IndexByte(b[:min(len(b), v1Max)], '\n'); i >= 0 {
		return i + 1
	}
	return 0
}

// proxiedConn is a connection whose PROXY header has been read: its
// RemoteAddr is the client the header named, and its first reads return
// what followed the header in the header's last read.
type proxiedConn struct {
	net.Conn
	rest   []byte
	remote net.Addr
}

func (c *proxiedConn) Read(p []byte) (int, error) {
	if len(c.rest) > 0 {
		n := copy(p, c.rest)
		c.rest = c.rest[n:]
		if len(c.rest) == 0 {
			c.rest = nil
		}
		return n, nil
	}
	return c.Conn.Read(p)
}

func (c *proxiedConn) RemoteAddr() net.Addr { return c.remote }

// ReadFrom keeps the TCP connection's own (large writes, sendfile).
func (c *proxiedConn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}
