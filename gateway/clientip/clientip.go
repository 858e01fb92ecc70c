// Package clientip finds the client's address: the TCP peer, unless the
// peer is a configured trusted proxy, in which case X-Forwarded-For is read
// from the right, skipping trusted hops. A client cannot spoof its address
// by sending X-Forwarded-For to the gateway directly.
package clientip

import (
	"bytes"
	"net"
	"net/netip"

	"github.com/valyala/fasthttp"
)

// Resolver knows the trusted proxies. It is immutable: a reload builds a new
// one.
type Resolver struct {
	trusted []netip.Prefix
}

// New returns a Resolver trusting the given ranges (none: only the peer).
func New(trusted []netip.Prefix) *Resolver {
	return &Resolver{trusted: append([]netip.Prefix(nil), trusted...)}
}

// Peer is the TCP peer address of ctx.
func Peer(ctx *fasthttp.RequestCtx) netip.Addr {
	if a, ok := ctx.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.IPv4Unspecified()
}

// Client is the client address of ctx.
func (r *Resolver) Client(ctx *fasthttp.RequestCtx) netip.Addr {
	client, _ := r.Resolve(ctx)
	return client
}

// Resolve is Client, and whether the peer is a trusted proxy (whose
// forwarded headers, and trace context, are believed).
func (r *Resolver) Resolve(ctx *fasthttp.RequestCtx) (client netip.Addr, trustedPeer bool) {
	peer := Peer(ctx)
	if !r.isTrusted(peer) {
		return peer, false
	}
	return r.fromForwarded(peer, ctx.Request.Header.PeekAll(fasthttp.HeaderXForwardedFor)), true
}

// fromForwarded walks the X-Forwarded-For values from the right: the first
// address that is not a trusted proxy is the client. A malformed entry
// stops the walk at the last hop that was trusted to report it.
func (r *Resolver) fromForwarded(peer netip.Addr, values [][]byte) netip.Addr {
	client := peer
	for i := len(values) - 1; i >= 0; i-- {
		v := values[i]
		for len(v) > 0 {
			j := bytes.LastIndexByte(v, ',')
			part := bytes.TrimSpace(v[j+1:])
			if j < 0 {
				v = nil
			} else {
				v = v[:j]
			}
			a, err := netip.ParseAddr(string(part))
			if err != nil {
				return client
			}
			client = a.Unmap()
			if !r.isTrusted(client) {
				return client
			}
		}
	}
	return client
}

// Trusts reports whether a is a trusted proxy.
func (r *Resolver) Trusts(a netip.Addr) bool { return r.isTrusted(a.Unmap()) }

func (r *Resolver) isTrusted(a netip.Addr) bool {
	for _, p := range r.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
