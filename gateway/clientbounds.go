package gateway

import (
	"net/netip"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"vendorgate/config"
	"vendorgate/gateway/auth"
	"vendorgate/gateway/connlimit"
	"vendorgate/gateway/edge"
	"vendorgate/gateway/requestid"
	"vendorgate/shared/apierr"
	"vendorgate/shared/wire"
)

// clientBounds are what a client may hold of the gateway before it has
// shown a key: no body memory (headerReceived) and a bounded number of
// connections per peer (counted by package edge; connRefusal answers one
// over a bound, connExempt says whose are not bounded). fasthttp sets
// aside a request's announced Content-Length, up to the body limit,
// before the handler runs; the limit is therefore decided from the
// headers, in Server.HeaderReceived. A request whose body was refused
// unread is answered by serveUnread and refuseUnread.
type clientBounds struct {
	// orderBodyBytes and readTimeout are the body limit and the body's
	// read timeout of an order placed with a key keys signed.
	orderBodyBytes int
	readTimeout    time.Duration
	keys           *auth.Authenticator
	// refusalBody is the envelope of a connection refused, by
	// connlimit.Reason; rids gives its answer a request id.
	refusalBody [connlimit.NumReasons][]byte
	rids        *requestid.Source
	// snap is the gateway's settings in force (their trusted proxies).
	snap *atomic.Pointer[snapshot]
}

// newClientBounds are c's bounds, for the keys signed as keys verifies.
func newClientBounds(c *config.Gateway, keys *auth.Authenticator, rids *requestid.Source, snap *atomic.Pointer[snapshot]) clientBounds {
	b := clientBounds{orderBodyBytes: c.OrderBodyLimit(), readTimeout: c.ReadTimeout, keys: keys, rids: rids, snap: snap}
	b.refusalBody[connlimit.Open], b.refusalBody[connlimit.Rate] = errConnsPerPeer.Body(), errNewConnsPerPeer.Body()
	return b
}

// noBodyBytes is the body limit of every request but an order placement
// with a signed key (edge.NoBodyBytes says why it is one byte).
const noBodyBytes = edge.NoBodyBytes

var (
	errConnsPerPeer    = &apierr.Error{Code: apierr.RateLimited, Message: "too many connections from this address; close some and see Retry-After"}
	errNewConnsPerPeer = &apierr.Error{Code: apierr.RateLimited, Message: "too many new connections from this address; keep connections alive and see Retry-After"}
)

// headerReceived is the public server's HeaderReceived, run on the headers
// of every request before any byte of its body is read. Only a POST (the
// method of the one route that takes a body, POST /api/vendor/v1/orders;
// a POST elsewhere is answered 404 or 405 by the router) whose X-API-Key
// carries this deployment's MAC gets the order body limit: memory for a
// body is earned by a key we signed, and the MAC check costs no lookup and
// no allocation. Every other request gets noBodyBytes; one that announces
// more is answered by serveUnread without its body being read. The path is
// not read here: the router normalises it, and a raw comparison would
// refuse what it matches.
//
// An order's body is read under a fresh read_timeout. Any other request's
// body (at most noBodyBytes) is read under the one its headers were read
// under, still running: setting it again would cost every read a clock
// read and a deadline reset for nothing to read.
func (b *clientBounds) headerReceived(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
	rc := fasthttp.RequestConfig{MaxRequestBodySize: noBodyBytes}
	if h.IsPost() && b.keys.Signed(h.Peek(wire.HeaderAPIKey)) {
		rc.MaxRequestBodySize, rc.ReadTimeout = b.orderBodyBytes, b.readTimeout
	}
	return rc
}

// serveUnread answers, on the unread router (routing.handle), a vendor
// route's request whose body was refused unread (over its limit): steps 2-4 (key format, resolution, failed-key throttle), then 413 for a
// key that passes them. It never proxies: the body is not there.
func (g *Gateway) serveUnread(ctx *fasthttp.RequestCtx, rt *route) {
	// Not ctx.Time(): the server sets it only for requests it hands to the
	// handler, and this one reached the error handler.
	ex := exchange{start: time.Now(), route: rt.label}
	sn := g.snap.Load()
	g.setRequestID(ctx, &ex)
	ex.client = sn.clientIP.Client(ctx)
	_, err := g.authenticate(ctx, sn, &ex)
	if err == nil {
		err = errBodyTooLarge
	}
	g.fail(ctx, err, &ex)
	g.finish(ctx, &ex)
}

// refuseUnread answers 413 to a request of a route that takes no key and
// no body (a documentation route), on the unread router. Neither it nor
// serveUnread reads a body or proxies. A vendor route authenticates (the
// failed-key throttle counts a bad key as on any request) and answers 413
// payload_too_large to a key that passes; a documentation route answers
// 413 at once.
func (g *Gateway) refuseUnread(ctx *fasthttp.RequestCtx, routeIndex int) {
	ex := exchange{start: time.Now(), route: routeIndex}
	g.setRequestID(ctx, &ex)
	ex.client = g.snap.Load().clientIP.Client(ctx)
	g.respond.Write(ctx, errBodyTooLarge, 0)
	g.finish(ctx, &ex)
}

// connRefusal is the answer to a connection over a per-peer bound
// (connlimit.Options.Refusal): 429 rate_limited in the envelope, with the
// headers every answer carries, and Connection: close. It is written
// before any request is read, so it names no route.
func (b *clientBounds) connRefusal(dst []byte, over connlimit.Reason) []byte {
	body := b.refusalBody[over]
	dst = append(dst, "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nCache-Control: no-store\r\nRetry-After: 1\r\nConnection: close\r\n"...)
	dst = append(dst, wire.HeaderRequestID...)
	dst = append(dst, ": "...)
	dst = b.rids.Append(dst)
	dst = append(dst, "\r\nContent-Length: "...)
	dst = strconv.AppendInt(dst, int64(len(body)), 10)
	dst = append(dst, "\r\n\r\n"...)
	return append(dst, body...)
}

// connExempt reports whether a peer's connections are not bounded: the
// trusted proxies in force, which carry many clients each.
func (b *clientBounds) connExempt(a netip.Addr) bool { return b.snap.Load().proxies.Trusts(a) }
