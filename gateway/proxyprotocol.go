package gateway

import (
	"net"

	"github.com/pires/go-proxyproto"
)

// proxyProtocol wraps ln, when proxy_protocol is on, so that a connection
// from a trusted proxy must begin with a PROXY header (v1 or v2) and its
// source address becomes the connection's RemoteAddr: the client address
// every later step reads (the failed-key throttle, the documentation limit,
// the access log, X-Forwarded-For to the backend). A connection from any
// other peer is returned as it is (SKIP: not a byte is read for a header,
// so a client cannot claim another address with one). The header is read
// on first use under read_timeout. Trusted proxies are those in force at
// accept (reloadable). Off, ln is returned unchanged: plain listeners pay
// nothing.
func (g *Gateway) proxyProtocol(ln net.Listener) net.Listener {
	if !g.proxyHeaders {
		return ln
	}
	return &proxyproto.Listener{
		Listener:          ln,
		ReadHeaderTimeout: g.readTimeout,
		ConnPolicy: func(o proxyproto.ConnPolicyOptions) (proxyproto.Policy, error) {
			if a, ok := o.Upstream.(*net.TCPAddr); ok && g.connExempt(a.AddrPort().Addr().Unmap()) {
				return proxyproto.REQUIRE, nil
			}
			return proxyproto.SKIP, nil
		},
	}
}
