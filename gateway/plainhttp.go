package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"vendorgate/config"
	"vendorgate/gateway/auth"
	"vendorgate/gateway/respond"
	"vendorgate/shared/apierr"
	"vendorgate/shared/wire"
)

// The optional plain-HTTP listener (http_listen) beside the HTTPS one. It
// proxies nothing: it sends browsers to the HTTPS address (public_base_url,
// never the request's Host: a Host of the client's choosing would make the
// gateway an open redirector), refuses the API in the envelope, and, for a
// request that carried an API key (on any path), says the key is exposed and
// logs its id for an operator to have it rotated: only for a key whose MAC
// verifies, and at most access_log.refusals_per_second lines a second, so
// that no one can write WARN lines at wire speed.

// plainHTTP is the plain listener's answers and metrics (its server is
// package edge's); nil without http_listen.
type plainHTTP struct {
	base    string // public_base_url without a trailing slash
	answers [plainAnswers]prometheus.Counter
	exposed prometheus.Counter
	// unverified counts the exposed keys whose MAC did not verify: made up
	// or another deployment's, neither logged nor looked up.
	unverified prometheus.Counter
	// warnings bounds the WARN lines of exposed keys that verify; the rest
	// are written as summaries each access_log.summary_interval.
	warnings *refusalLog
	refusal  *apierr.Error // a request under /api/ without a key
	exposure *apierr.Error // one with a key
}

// plainAnswer labels vendorgate_gateway_plain_http_requests_total.
type plainAnswer int

const (
	plainRedirect plainAnswer = iota
	plainAPIRefused
	plainNotFound
	plainKeyRefused // a request outside /api/ that carried a key
	plainAnswers
)

var plainAnswerNames = [plainAnswers]string{"redirect", "api_refused", "not_found", "key_refused"}

// The WARN line of a key sent in clear text, and the summary of those not
// written in full.
const (
	plainKeyWarning = "api key sent over plain http: treat it as exposed and have the vendor rotate it"
	plainKeySummary = "api keys sent over plain http, not logged one by one"
)

func (g *Gateway) setupPlainHTTP(c *config.Gateway) {
	if c.HTTPListen == "" {
		return
	}
	p := &plainHTTP{base: strings.TrimSuffix(c.PublicBaseURL, "/"),
		warnings: newSummaryLog(c.AccessLog.RefusalsPerSecond, plainKeySummary, slog.LevelWarn)}
	p.refusal = &apierr.Error{Code: apierr.RequestFailed, HTTPStatus: fasthttp.StatusBadRequest,
		Message: fmt.Sprintf("this API is served over HTTPS only: send the request to %s", p.base)}
	p.exposure = &apierr.Error{Code: apierr.RequestFailed, HTTPStatus: fasthttp.StatusBadRequest,
		Message: fmt.Sprintf("this API is served over HTTPS only: send the request to %s. The API key sent with this request crossed the network in clear text: treat it as exposed, create a new key and revoke this one", p.base)}
	answers := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vendorgate_gateway_plain_http_requests_total",
		Help: "Requests to the plain-HTTP listener (http_listen), by answer: redirect (308 to public_base_url), api_refused (400 under /api/, never proxied), not_found, key_refused (400: a request outside /api/ that carried an X-API-Key)."},
		[]string{"answer"})
	for i := range p.answers {
		p.answers[i] = answers.WithLabelValues(plainAnswerNames[i])
	}
	p.exposed = prometheus.NewCounter(prometheus.CounterOpts{Name: "vendorgate_gateway_cleartext_keys_total",
		Help: "Requests to the plain-HTTP listener that carried an X-API-Key: each such key crossed the network in clear text (the log names the key id of one whose MAC verifies)."})
	p.unverified = prometheus.NewCounter(prometheus.CounterOpts{Name: "vendorgate_gateway_cleartext_keys_unverified_total",
		Help: "Of vendorgate_gateway_cleartext_keys_total, the keys whose MAC did not verify (made up, or another deployment's): neither logged nor looked up."})
	g.metrics.Registry.MustRegister(answers, p.exposed, p.unverified)
	g.plain = p
}

// servePlain answers one request on the plain listener. A request that
// carried a key is refused as exposed on any path: redirected, a client
// would send the key again over HTTPS and never learn it had leaked.
func (g *Gateway) servePlain(ctx *fasthttp.RequestCtx) {
	p := g.plain
	path := ctx.Path()
	key := ctx.Request.Header.Peek(wire.HeaderAPIKey)
	switch {
	case bytes.HasPrefix(path, []byte("/api/")) || bytes.Equal(path, []byte("/api")):
		g.refusePlainAPI(ctx, key)
	case len(key) > 0:
		g.refusePlainKey(ctx, key, plainKeyRefused, "outside /api/")
	case bytes.Equal(path, []byte("/")) || bytes.Equal(path, []byte("/docs")):
		// 308 keeps the method; the target is the configured address and
		// the fixed path, nothing of the request's.
		ctx.Response.Header.Set("Location", p.base+string(path))
		ctx.SetStatusCode(fasthttp.StatusPermanentRedirect)
		respond.Common(ctx, g.plainRequestID(ctx))
		p.answers[plainRedirect].Inc()
	case g.edge.HTTPChallenge(ctx, path): // ACME HTTP-01; not found unless an order is under way
	default:
		g.respond.Write(ctx, errNotFound, 0)
		respond.Common(ctx, g.plainRequestID(ctx))
		p.answers[plainNotFound].Inc()
	}
}

// refusePlainAPI answers a request under /api/: 400 request_failed, never
// proxied; one that carried a key as refusePlainKey does.
func (g *Gateway) refusePlainAPI(ctx *fasthttp.RequestCtx, key []byte) {
	p := g.plain
	if len(key) > 0 {
		g.refusePlainKey(ctx, key, plainAPIRefused, "/api/")
		return
	}
	p.answers[plainAPIRefused].Inc()
	g.respond.Write(ctx, p.refusal, 0)
	respond.Common(ctx, g.plainRequestID(ctx))
}

// refusePlainKey answers a request that carried raw, a key, in clear text:
// 400 request_failed saying the key is exposed, counted. A key whose MAC
// verifies is logged at WARN with its id (resolved: never the key) within
// the rate of access_log.refusals_per_second, past it summarised by where
// it was sent (where); one that does not is only counted, with no lookup,
// so that made-up keys sent at wire speed write no line.
func (g *Gateway) refusePlainKey(ctx *fasthttp.RequestCtx, raw []byte, answer plainAnswer, where string) {
	p := g.plain
	p.answers[answer].Inc()
	p.exposed.Inc()
	rid := g.plainRequestID(ctx)
	g.respond.Write(ctx, p.exposure, 0)
	respond.Common(ctx, rid)
	if !g.auth.Signed(raw) {
		p.unverified.Inc()
		return
	}
	if !p.warnings.admit(apierr.RequestFailed, where, fasthttp.StatusBadRequest, time.Now()) {
		return
	}
	attrs := []any{"request_id", string(rid), "client", g.snap.Load().clientIP.Client(ctx).String(), "method", string(ctx.Method()),
		"path", where}
	sum := auth.Sum(raw)
	id, err := g.auth.Authenticate(raw, &sum, rid, nil)
	if id != nil {
		attrs = append(attrs, "key_id", id.KeyID, "vendor_id", id.VendorID)
	} else {
		attrs = append(attrs, "key_id", "")
	}
	attrs = append(attrs, "key_status", keyStatus(err))
	g.log.Warn(plainKeyWarning, attrs...)
}

// keyStatus names the state of an exposed key for the log line; never the
// error's text, which is not written for it.
func keyStatus(err error) string {
	switch {
	case err == nil:
		return "valid"
	case errors.Is(err, auth.ErrUnknownKey):
		return "unknown"
	case errors.Is(err, auth.ErrRevoked):
		return "revoked"
	case errors.Is(err, auth.ErrKeyExpired):
		return "expired"
	}
	return "not resolved (lookup failed)"
}

// plainError answers a request whose head or body the server refused: a
// body over the limit is answered from the headers like any other request
// (an API request with a key is told the key is exposed); anything else is
// 400 validation_error.
func (g *Gateway) plainError(ctx *fasthttp.RequestCtx, err error) {
	ctx.SetConnectionClose()
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		g.servePlain(ctx)
		return
	}
	g.respond.Write(ctx, errMalformed, 0)
	respond.Common(ctx, g.plainRequestID(ctx))
}

// plainRequestID is a new request id for a plain-listener answer.
func (g *Gateway) plainRequestID(ctx *fasthttp.RequestCtx) []byte {
	var ex exchange
	g.setRequestID(ctx, &ex)
	return append([]byte(nil), ex.requestID()...)
}

// flushPlainWarnings writes the summary of the key warnings not written in
// full, when due (or always, when force); nothing without http_listen.
func (g *Gateway) flushPlainWarnings(force bool) {
	if g.plain != nil && (force || g.plain.warnings.due(g.summaryEvery)) {
		g.plain.warnings.flush(g.log)
	}
}
