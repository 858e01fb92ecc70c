package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"runtime/debug"
	"time"

	"github.com/valyala/fasthttp"

	"vendorgate/gateway/accesslog"
	"vendorgate/gateway/admission"
	"vendorgate/gateway/auth"
	"vendorgate/gateway/clientip"
	"vendorgate/gateway/edge"
	"vendorgate/gateway/limit"
	"vendorgate/gateway/proxy"
	"vendorgate/gateway/respond"
	"vendorgate/gateway/spans"
	"vendorgate/shared/apierr"
	"vendorgate/shared/wire"
)

// The gateway's own refusals, encoded once (respond.Writer).
var (
	errNotFound         = &apierr.Error{Code: apierr.NotFound, Message: "no such path"}
	errMethodNotAllowed = &apierr.Error{Code: apierr.MethodNotAllowed, Message: "method not allowed on this path"}
	errInvalidKey       = &apierr.Error{Code: apierr.InvalidAPIKey, Message: "missing, malformed, unknown or revoked API key"}
	errKeyExpired       = &apierr.Error{Code: apierr.APIKeyExpired, Message: "the API key has expired"}
	errNotApproved      = &apierr.Error{Code: apierr.AccountNotApproved, Message: "the account is not approved yet"}
	errSuspended        = &apierr.Error{Code: apierr.AccountSuspended, Message: "the account is suspended: results can be read, new orders are refused"}
	errThrottled        = &apierr.Error{Code: apierr.RateLimited, Message: "too many failed API keys; see Retry-After"}
	errBodyTooLarge     = &apierr.Error{Code: apierr.PayloadTooLarge, Message: "the request body is too large"}
	errHeaderTooLarge   = &apierr.Error{Code: apierr.RequestFailed, Message: "the request headers are too large", HTTPStatus: fasthttp.StatusRequestHeaderFieldsTooLarge}
	errMalformed        = &apierr.Error{Code: apierr.ValidationError, Message: "malformed HTTP request"}
)

func cannedErrors() []*apierr.Error {
	return []*apierr.Error{errNotFound, errMethodNotAllowed, errInvalidKey, errKeyExpired, errNotApproved,
		errSuspended, errThrottled, errBodyTooLarge, errHeaderTooLarge, errMalformed}
}

// exchange is what one request collects on its way through, for its
// answer's headers, its metrics and its access log line.
type exchange struct {
	start  time.Time
	route  int
	client netip.Addr
	// trustedPeer: the peer is a trusted proxy, whose trace context
	// (sampling decision, tracestate) is followed and passed on.
	trustedPeer bool
	vendorID    string
	keyID       string
	ridLen      int
	rid         [64]byte
	// adm is the request's admission under its limits (package
	// admission): each kind's decision, for the RateLimit headers; the
	// limit that refused it, if one did; and the slots it holds until its
	// answer is done (nil once a streamed body took them: proxy.Forward).
	adm admission.Admission
	// for the access log
	err      error         // what fail answered, nil when the request passed
	upstream time.Duration // the backend call's time (proxy.Forward's measurement)
	trace    spans.Request // zero when tracing is off
	// keyExpires is the key's expiry when it falls within
	// key_expiry_warning of the request: the answer says it
	// (X-API-Key-Expiration). Zero otherwise.
	keyExpires time.Time
}

func (ex *exchange) requestID() []byte { return ex.rid[:ex.ridLen] }

// serve is the public handler: the routes with parameters (matched
// without copying their values: paramRoute), then the router, inside a
// panic guard.
func (g *Gateway) serve(ctx *fasthttp.RequestCtx) {
	defer g.recoverPanic(ctx)
	if h := g.routes.params.Handler(ctx); h != nil {
		h(ctx)
		return
	}
	g.routes.router.Handler(ctx)
}

// serveVendor is one request to a known route, DESIGN.md's steps in order.
// Step 1 (route) happened in the router.
func (g *Gateway) serveVendor(ctx *fasthttp.RequestCtx, rt *route) {
	// The server read the clock when the request had been read; reading it
	// again costs a clock call on every request.
	ex := exchange{start: ctx.Time(), route: rt.label}
	defer ex.adm.Release() // also when a panic unwinds (the guard in serve answers it)
	sn := g.snap.Load()
	g.setRequestID(ctx, &ex)
	ex.client, ex.trustedPeer = sn.clientIP.Resolve(ctx)
	if g.tracer != nil { // a server span, when tracing is on
		ex.trace.Begin(g.tracer, ctx, ex.trustedPeer, g.routes.labels.of(ex.route), ex.start)
	}
	id, err := g.authenticate(ctx, sn, &ex) // steps 2-4: key format, resolve, failed-key throttle
	if err == nil {
		edge.ShownKey(ctx.Conn()) // a vendor's connection: the server's idle timeout (edge/keyless.go)
		if expires := id.ExpiresAt(); expires.Sub(ex.start) <= sn.cfg.KeyExpiryWarning {
			ex.keyExpires = expires // every answer to this key says when it expires
		}
		err = g.admit(sn, id, rt, &ex) // steps 5-6: account state, exact limits (fail closed), requests in flight
	}
	if err == nil {
		err = g.forward(ctx, id, rt, &ex) // step 7: proxy; a streamed report takes the slot until its last byte
		if ex.adm.Plan.Refunds && failedForBackend(ctx, err) {
			g.refund(&ex) // the vendor is not charged for the backend's failure
		}
	}
	if err != nil {
		g.fail(ctx, err, &ex) // step 8: every refusal leaves through one envelope
	}
	g.finish(ctx, &ex) // step 8: no-store, X-Request-Id, RateLimit headers, metrics, log
}

// serveRefusal answers a request the router refused (404, 405).
func (g *Gateway) serveRefusal(ctx *fasthttp.RequestCtx, e *apierr.Error) {
	ex := exchange{start: time.Now(), route: routeUnmatched}
	g.setRequestID(ctx, &ex)
	ex.client = g.snap.Load().clientIP.Client(ctx)
	ex.err = e
	g.respond.Write(ctx, e, 0)
	g.finish(ctx, &ex)
}

// serverError answers what fasthttp refused before routing: a body over
// its limit (an announced one unread, answered from the headers by the
// unread router: clientbounds.go; a chunked one cut midway, whose headers
// fasthttp has reset, 413), headers over the buffer (431), a malformed
// request (400).
func (g *Gateway) serverError(ctx *fasthttp.RequestCtx, err error) {
	if errors.Is(err, fasthttp.ErrBodyTooLarge) && ctx.Request.Header.ContentLength() > 0 {
		defer g.recoverPanic(ctx)
		g.routes.unread.Handler(ctx)
		return
	}
	ex := exchange{start: time.Now(), route: routeUnmatched}
	g.setRequestID(ctx, &ex)
	ex.client = clientip.Peer(ctx)
	var small *fasthttp.ErrSmallBuffer
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		ex.err = errBodyTooLarge
	case errors.As(err, &small):
		ex.err = errHeaderTooLarge
	default:
		ex.err = errMalformed
	}
	g.respond.Error(ctx, ex.err)
	g.finish(ctx, &ex)
}

// recoverPanic is the last guard: a panic answers 500 internal_error.
func (g *Gateway) recoverPanic(ctx *fasthttp.RequestCtx) {
	p := recover()
	if p == nil {
		return
	}
	g.log.Error("panic serving request", "panic", p, "stack", string(debug.Stack()))
	ex := exchange{start: time.Now(), route: routeUnmatched}
	ctx.Response.Reset()
	g.setRequestID(ctx, &ex)
	ex.err = respond.Internal()
	g.respond.Write(ctx, respond.Internal(), 0)
	g.finish(ctx, &ex)
}

// authenticate is steps 2-4: X-API-Key's format and prefix, its resolution,
// and on failure the failed-key throttle (429 instead of 401 past it).
func (g *Gateway) authenticate(ctx *fasthttp.RequestCtx, sn *snapshot, ex *exchange) (*auth.Identity, error) {
	raw := ctx.Request.Header.Peek(wire.HeaderAPIKey)
	ex.trace.BeginStep(spans.KeyLookup)
	id, err := g.auth.Authenticate(raw, ex.requestID(), ex.trace.StepContext())
	ex.trace.End(err)
	if id != nil {
		ex.vendorID, ex.keyID = id.VendorID, id.KeyID // ids, never the key
	}
	if err == nil {
		return id, nil
	}
	var reason string
	refusal := errInvalidKey
	switch {
	case errors.Is(err, auth.ErrMissingKey):
		reason = "missing"
	case errors.Is(err, auth.ErrMalformed):
		reason = "malformed"
	case errors.Is(err, auth.ErrForeignKey):
		reason = "foreign_prefix"
	case errors.Is(err, auth.ErrBadSignature):
		reason = "bad_signature"
	case errors.Is(err, auth.ErrUnknownKey):
		reason = "unknown"
	case errors.Is(err, auth.ErrRevoked):
		reason = "revoked"
	case errors.Is(err, auth.ErrKeyExpired):
		reason, refusal = "expired", errKeyExpired
	default:
		return nil, err // the lookup failed: 503, not the key's fault
	}
	g.metrics.AuthFailures.WithLabelValues(reason).Inc()
	// The throttle counts a key by its SHA-256, as every replica does: made
	// only for a refused key.
	var sum [32]byte
	var keySum *[32]byte
	if len(raw) > 0 {
		sum = auth.Sum(raw)
		keySum = &sum
	}
	// Counted in Redis, or in process when Redis cannot count (down, slow,
	// the throttle's connections all in use): told once, by the throttle.
	if v := g.stores.Throttle.Fail(ex.client, keySum, sn.failedKeys); v.Over {
		return nil, &respond.Refusal{Err: errThrottled, RetryAfter: v.RetryAfter}
	}
	return nil, refusal
}

// admit is steps 5-6: the account's state, then every limit of the
// request in one call (package admission: the quotas and sliding windows,
// the GCRA limits, the vendor's requests in flight here, the concurrency
// policies' slots; all or none charged), which holds the request's slots
// until its answer is done. It decides; admission.Books keeps the books
// (metrics, usage, shadow log).
func (g *Gateway) admit(sn *snapshot, id *auth.Identity, rt *route, ex *exchange) error {
	switch id.Status() {
	case wire.VendorApproved:
	case wire.VendorSuspended:
		if rt.placesOrder {
			return errSuspended
		}
	default:
		return errNotApproved
	}
	req := admission.Request{Table: sn.table(id.VendorID), Route: rt.plan, Buckets: id.Buckets(sn.layout),
		Vendor: id.VendorID, InFlight: id.InFlight, Caps: sn.inFlightCaps(id.VendorID), Download: rt.streams}
	ex.trace.BeginStep(spans.Limiter)
	err := g.admission.Admit(&ex.adm, &req)
	refused := err == admission.ErrRefused
	if refused {
		ex.trace.End(nil) // a decision, not a failure
	} else {
		ex.trace.End(err)
	}
	g.books.Admission(sn.decisions, id, &ex.adm, req.Buckets)
	if refused {
		// The message names the limit, what it allows and when to retry
		// (it allocates: refusals only).
		r := &ex.adm.Refused
		return &respond.Refusal{Err: &apierr.Error{Code: apierr.RateLimited, Message: r.Message()}, RetryAfter: r.RetryAfter}
	}
	return err
}

// forward is step 7.
func (g *Gateway) forward(ctx *fasthttp.RequestCtx, id *auth.Identity, rt *route, ex *exchange) error {
	var ip [48]byte
	// The backend follows the trace context it is sent: a trusted proxy's,
	// or the gateway's own span's (beginBackend); an untrusted caller's
	// loses its sampling decision and tracestate on the way.
	pid := proxy.Identity{VendorID: id.VendorID, KeyID: id.KeyID, Environment: id.Environment(),
		RequestID: ex.requestID(), ClientIP: ex.client.AppendTo(ip[:0]),
		KeepTraceContext: ex.trustedPeer || ex.trace.Active()}
	ex.trace.BeginBackend(ctx)
	var err error
	ex.upstream, err = g.proxy.Forward(ctx, &pid, rt.streams, &ex.adm.Slot)
	ex.trace.End(err)
	return err
}

// refund gives back the tokens of a request the gateway failed for the
// backend, for the policies that refund, and counts what went back.
func (g *Gateway) refund(ex *exchange) {
	if !ex.adm.Decided || !ex.adm.Decision.Allowed {
		return // nothing charged
	}
	n, charged := ex.adm.Refund()
	g.metrics.Refunds.WithLabelValues("given_back").Add(float64(n))
	g.metrics.Refunds.WithLabelValues("kept").Add(float64(max(charged-n, 0)))
}

// failedForBackend reports whether the gateway failed a forwarded request
// for the backend: the backend answered 5xx (as it was, or rewritten into
// the envelope), or did not answer in time (504). Never a 503 the gateway
// makes itself: the backend refused or its breaker is open, or the limiter
// could not decide (which charged nothing).
func failedForBackend(ctx *fasthttp.RequestCtx, err error) bool {
	var ae *apierr.Error
	switch {
	case err == nil, errors.As(err, &ae): // the backend's own answer
		return ctx.Response.StatusCode() >= fasthttp.StatusInternalServerError
	case errors.Is(err, proxy.ErrTimeout):
		return true
	}
	return false
}

// fail writes err's envelope. A dependency's failure is counted for the
// line that tells of its return, not logged per request (the access log has
// the request's error code and cause); an unexpected error is logged,
// never shown.
func (g *Gateway) fail(ctx *fasthttp.RequestCtx, err error, ex *exchange) {
	ex.err = err
	g.outages.CountRefusal(err, time.Now())
	if g.respond.Error(ctx, err) {
		g.log.Error("unexpected error", "request_id", string(ex.requestID()), "err", err)
	}
}

// finish is the end of every answer: the common headers, the RateLimit
// headers, metrics and the access log line.
func (g *Gateway) finish(ctx *fasthttp.RequestCtx, ex *exchange) {
	if ex.adm.Decided || ex.adm.Windows != nil {
		setRateLimitHeaders(ctx, ex)
	}
	respond.Common(ctx, ex.requestID())
	if !ex.keyExpires.IsZero() {
		respond.SetKeyExpiration(ctx, ex.keyExpires)
	}
	if g.draining.Load() {
		ctx.SetConnectionClose() // a draining replica sends clients elsewhere
	}
	status := ctx.Response.StatusCode()
	d := time.Since(ex.start)
	g.metrics.Request(ex.route, ctx.Method(), status, d)
	g.metrics.ObserveRequest(ex.route, d, ex.trace.Finish(ctx, status, ex.requestID(), ex.vendorID, ex.keyID))
	// Ask the handler first: the attributes are built (and allocate)
	// before LogAttrs could drop a line below the configured level.
	if g.alog.on && g.log.Enabled(context.Background(), slog.LevelInfo) {
		accesslog.Write(g.log, g.alog.refusals, ctx, &accesslog.Entry{Route: g.routes.labels.of(ex.route), Status: status,
			Start: ex.start, Duration: d, Upstream: ex.upstream, Err: ex.err, VendorID: ex.vendorID, KeyID: ex.keyID,
			Client: ex.client, Limit: limitOutcome(&ex.adm, ex.err), Policy: ex.adm.Refused.Name}, ex.requestID(), &ex.trace)
	}
}

// limitOutcome is the access log's limit field: the admission's verdict,
// or unavailable when the limits could not be asked of Redis.
func limitOutcome(adm *admission.Admission, err error) string {
	if o := adm.Outcome(); o != "" {
		return o
	}
	if err != nil && errors.Is(err, limit.ErrUnavailable) {
		return "unavailable"
	}
	return ""
}

// setRequestID gives the request its id (package requestid): the
// client's X-Request-Id when it is sane, else a new one.
func (g *Gateway) setRequestID(ctx *fasthttp.RequestCtx, ex *exchange) {
	ex.ridLen = g.rids.Set(&ex.rid, &ctx.Request.Header)
}
