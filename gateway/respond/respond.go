// Package respond writes every answer the gateway itself produces: the
// error envelope with its status, Retry-After on refusals, and the headers
// every response under /api/vendor/ carries (Cache-Control: no-store and
// X-Request-Id). Error is the one place an error becomes a status.
package respond

import (
	"errors"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"vendorgate/gateway/backendapi"
	"vendorgate/gateway/limit"
	"vendorgate/gateway/proxy"
	"vendorgate/shared/apierr"
	"vendorgate/shared/httpapi"
	"vendorgate/shared/wire"
)

// Refusal is an API error that tells the client when to try again.
type Refusal struct {
	Err        *apierr.Error
	RetryAfter time.Duration
}

func (r *Refusal) Error() string { return r.Err.Error() }
func (r *Refusal) Unwrap() error { return r.Err }

// Writer writes envelopes. The bodies of the fixed errors named at
// construction are encoded once, so that a refusal under load costs no
// JSON encoding.
type Writer struct {
	bodies map[*apierr.Error][]byte // read-only after NewWriter
}

// NewWriter returns a Writer that pre-encodes canned, the gateway's fixed
// errors (never modified afterwards), and its own.
func NewWriter(canned ...*apierr.Error) *Writer {
	w := &Writer{bodies: make(map[*apierr.Error][]byte)}
	for _, e := range append(canned, errLimiterDown, errBackendDown, errBackendTimeout, errInternal) {
		w.bodies[e] = e.Body()
	}
	return w
}

// Errors the mapping produces.
var (
	errLimiterDown    = &apierr.Error{Code: apierr.RateLimitUnavailable, Message: "the rate limiter is unavailable; try again shortly"}
	errBackendDown    = &apierr.Error{Code: apierr.RequestFailed, Message: "the service is unavailable; try again shortly", HTTPStatus: fasthttp.StatusServiceUnavailable}
	errBackendTimeout = &apierr.Error{Code: apierr.RequestFailed, Message: "the service did not answer in time", HTTPStatus: fasthttp.StatusGatewayTimeout}
	errInternal       = &apierr.Error{Code: apierr.InternalError, Message: "internal error"}
)

// Internal is the 500 envelope (a recovered panic, an unknown error).
func Internal() *apierr.Error { return errInternal }

// Error writes the answer for err and reports whether err was unexpected
// (the caller logs it; it is never shown).
func (w *Writer) Error(ctx *fasthttp.RequestCtx, err error) (unexpected bool) {
	e, retryAfter, unexpected := Resolve(err)
	w.Write(ctx, e, retryAfter)
	return unexpected
}

// Resolve is the one mapping of an error to its answer: Redis trouble →
// 503 rate_limit_unavailable; the node too busy to get a limit decided
// while Redis answers (limit.ErrBusy), backend refused or breaker open →
// 503 request_failed; backend timeout → 504 request_failed; anything else
// unknown → 500 internal_error (unexpected).
func Resolve(err error) (e *apierr.Error, retryAfter time.Duration, unexpected bool) {
	var ref *Refusal
	var ae *apierr.Error
	switch {
	case errors.As(err, &ref):
		return ref.Err, ref.RetryAfter, false
	case errors.As(err, &ae):
		return ae, 0, false
	case errors.Is(err, limit.ErrUnavailable):
		return errLimiterDown, time.Second, false
	case errors.Is(err, limit.ErrBusy): // the node is overloaded, not Redis
		return errBackendDown, time.Second, false
	case errors.Is(err, proxy.ErrTimeout):
		return errBackendTimeout, 0, false
	case errors.Is(err, proxy.ErrUnavailable), errors.Is(err, backendapi.ErrUnavailable):
		return errBackendDown, time.Second, false
	default:
		return errInternal, 0, true
	}
}

// Write writes e as the envelope with its status. Retry-After is set when
// retryAfter is positive, and always on 429 and 503 (at least 1 second).
func (w *Writer) Write(ctx *fasthttp.RequestCtx, e *apierr.Error, retryAfter time.Duration) {
	status := e.Status()
	httpapi.WriteJSON(ctx, status, w.body(e))
	if retryAfter > 0 || status == fasthttp.StatusTooManyRequests || status == fasthttp.StatusServiceUnavailable {
		SetRetryAfter(ctx, retryAfter)
	}
	if status == fasthttp.StatusUnauthorized {
		ctx.Response.Header.Set("WWW-Authenticate", `APIKey header="X-API-Key"`)
	}
}

func (w *Writer) body(e *apierr.Error) []byte {
	if b, ok := w.bodies[e]; ok {
		return b
	}
	return e.Body()
}

// RetryAfterSeconds is d in whole seconds, rounded up, at least 1.
func RetryAfterSeconds(d time.Duration) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	if s < 1 {
		return 1
	}
	return s
}

// SetRetryAfter sets Retry-After to d in whole seconds (rounded up, >= 1).
func SetRetryAfter(ctx *fasthttp.RequestCtx, d time.Duration) {
	var buf [20]byte
	ctx.Response.Header.SetCanonical(canonRetryAfter, strconv.AppendInt(buf[:0], RetryAfterSeconds(d), 10))
}

// Common sets the headers every response carries: Cache-Control: no-store
// and X-Request-Id. Call it last: proxying replaces the response headers.
func Common(ctx *fasthttp.RequestCtx, requestID []byte) {
	ctx.Response.Header.SetCanonical(canonCacheControl, noStore)
	ctx.Response.Header.SetCanonical(canonRequestID, requestID)
}

// SetKeyExpiration sets X-API-Key-Expiration to the key's expiry, RFC 3339
// in UTC to the second (2027-02-21T11:00:00Z): the answer to a key within
// key_expiry_warning of its expiry, as GitHub answers a token's requests
// with GitHub-Authentication-Token-Expiration.
func SetKeyExpiration(ctx *fasthttp.RequestCtx, expires time.Time) {
	var buf [32]byte
	ctx.Response.Header.SetCanonical(canonKeyExpiration, expires.UTC().AppendFormat(buf[:0], time.RFC3339))
}

// The response headers every answer carries, spelled as fasthttp
// normalizes header names (TestCanonicalNames checks them), so that
// SetCanonical need not copy and normalize them on every request.
var (
	canonCacheControl = []byte("Cache-Control")
	canonRequestID    = []byte(wire.HeaderRequestID)
	// canonKeyExpiration is X-API-Key-Expiration, as normalized.
	canonKeyExpiration = []byte("X-Api-Key-Expiration")
	canonRetryAfter    = []byte("Retry-After")
	canonPolicy        = []byte("Ratelimit-Policy") // RateLimit-Policy, as normalized
	canonRateLimit     = []byte("Ratelimit")        // RateLimit, as normalized
	noStore            = []byte("no-store")
)

// SetRateLimit sets the RateLimit-Policy and RateLimit fields (IETF draft
// httpapi-ratelimit-headers) to policy and state; an empty state is left
// out.
func SetRateLimit(ctx *fasthttp.RequestCtx, policy, state []byte) {
	ctx.Response.Header.SetCanonical(canonPolicy, policy)
	if len(state) > 0 {
		ctx.Response.Header.SetCanonical(canonRateLimit, state)
	}
}
