// Package plain answers the optional plain-HTTP listener (http_listen)
// beside the HTTPS one; its server is package edge's. It proxies nothing:
// it sends browsers to the HTTPS address (public_base_url, never the
// request's Host: a Host of the client's choosing would make the gateway an
// open redirector), refuses the API in the envelope, and, for a request
// that carried an API key (on any path), says the key is exposed and logs
// its id for an operator to have it rotated: only for a key whose MAC
// verifies, and at most access_log.refusals_per_second lines a second, so
// that no one can write WARN lines at wire speed. One file: plain.go.
package plain

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"vendorgate/gateway/accesslog"
	"vendorgate/gateway/auth"
	"vendorgate/gateway/respond"
	"vendorgate/shared/apierr"
	"vendorgate/shared/wire"
)

// Keys is what the plain listener needs of the key authenticator: whether
// a key's MAC verifies, and the key's identity and state for the log line.
type Keys interface {
	Signed(raw []byte) bool
	Authenticate(raw []byte, rid []byte, trace context.Context) (*auth.Identity, error)
}

// Options is what New needs; every field is required.
type Options struct {
	// BaseURL is public_base_url, where browsers are sent.
	BaseURL string
	// RefusalsPerSecond is access_log.refusals_per_second (0: no bound).
	RefusalsPerSecond int
	Registry          prometheus.Registerer
	Logger            *slog.Logger
	Respond           *respond.Writer
	Keys              Keys
	// NotFound and Malformed are the gateway's answers to an unknown path
	// and to a request the server refused.
	NotFound, Malformed *apierr.Error
	// RequestID gives a new request id for an answer (and sets its header).
	RequestID func(ctx *fasthttp.RequestCtx) []byte
	// Client names the request's client for the log line.
	Client func(ctx *fasthttp.RequestCtx) string
	// Challenge answers an ACME HTTP-01 challenge, reporting whether it did.
	Challenge func(ctx *fasthttp.RequestCtx, path []byte) bool
}

// Handler is the plain listener's answers and metrics.
type Handler struct {
	o       Options
	base    string // public_base_url without a trailing slash
	answers [numAnswers]prometheus.Counter
	exposed prometheus.Counter
	// unverified counts the exposed keys whose MAC did not verify: made up
	// or another deployment's, neither logged nor looked up.
	unverified prometheus.Counter
	// warnings bounds the WARN lines of exposed keys that verify; the rest
	// are written as summaries each access_log.summary_interval.
	warnings *accesslog.Refusals
	refusal  *apierr.Error // a request under /api/ without a key
	exposure *apierr.Error // one with a key
}

// answer labels vendorgate_gateway_plain_http_requests_total.
type answer int

const (
	redirect answer = iota
	apiRefused
	notFound
	keyRefused // a request outside /api/ that carried a key
	numAnswers
)

var answerNames = [numAnswers]string{"redirect", "api_refused", "not_found", "key_refused"}

// The WARN line of a key sent in clear text, and the summary of those not
// written in full.
const (
	keyWarning = "api key sent over plain http: treat it as exposed and have the vendor rotate it"
	keySummary = "api keys sent over plain http, not logged one by one"
)

// New builds the plain listener's answers and registers their metrics.
func New(o Options) (*Handler, error) {
	if o.BaseURL == "" || o.RefusalsPerSecond < 0 || o.Registry == nil || o.Logger == nil || o.Respond == nil || o.Keys == nil ||
		o.NotFound == nil || o.Malformed == nil || o.RequestID == nil || o.Client == nil || o.Challenge == nil {
		return nil, errors.New("plain: incomplete options")
	}
	p := &Handler{o: o, base: strings.TrimSuffix(o.BaseURL, "/"),
		warnings: accesslog.NewSummary(o.RefusalsPerSecond, keySummary, slog.LevelWarn)}
	p.refusal = &apierr.Error{Code: apierr.RequestFailed, HTTPStatus: fasthttp.StatusBadRequest,
		Message: fmt.Sprintf("this API is served over HTTPS only: send the request to %s", p.base)}
	p.exposure = &apierr.Error{Code: apierr.RequestFailed, HTTPStatus: fasthttp.StatusBadRequest,
		Message: fmt.Sprintf("this API is served over HTTPS only: send the request to %s. The API key sent with this request crossed the network in clear text: treat it as exposed, create a new key and revoke this one", p.base)}
	answers := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vendorgate_gateway_plain_http_requests_total",
		Help: "Requests to the plain-HTTP listener (http_listen), by answer: redirect (308 to public_base_url), api_refused (400 under /api/, never proxied), not_found, key_refused (400: a request outside /api/ that carried an X-API-Key)."},
		[]string{"answer"})
	for i := range p.answers {
		p.answers[i] = answers.WithLabelValues(answerNames[i])
	}
	p.exposed = prometheus.NewCounter(prometheus.CounterOpts{Name: "vendorgate_gateway_cleartext_keys_total",
		Help: "Requests to the plain-HTTP listener that carried an X-API-Key: each such key crossed the network in clear text (the log names the key id of one whose MAC verifies)."})
	p.unverified = prometheus.NewCounter(prometheus.CounterOpts{Name: "vendorgate_gateway_cleartext_keys_unverified_total",
		Help: "Of vendorgate_gateway_cleartext_keys_total, the keys whose MAC did not verify (made up, or another deployment's): neither logged nor looked up."})
	for _, c := range []prometheus.Collector{answers, p.exposed, p.unverified} {
		if err := o.Registry.Register(c); err != nil {
			return nil, fmt.Errorf("plain: metrics: %w", err)
		}
	}
	return p, nil
}

// Serve answers one request on the plain listener. A request that carried
// a key is refused as exposed on any path: redirected, a client would send
// the key again over HTTPS and never learn it had leaked.
func (p *Handler) Serve(ctx *fasthttp.RequestCtx) {
	path := ctx.Path()
	key := ctx.Request.Header.Peek(wire.HeaderAPIKey)
	switch {
	case bytes.HasPrefix(path, []byte("/api/")) || bytes.Equal(path, []byte("/api")):
		p.refuseAPI(ctx, key)
	case len(key) > 0:
		p.refuseKey(ctx, key, keyRefused, "outside /api/")
	case bytes.Equal(path, []byte("/")) || bytes.Equal(path, []byte("/docs")):
		// 308 keeps the method; the target is the configured address and
		// the fixed path, nothing of the request's.
		ctx.Response.Header.Set("Location", p.base+string(path))
		ctx.SetStatusCode(fasthttp.StatusPermanentRedirect)
		respond.Common(ctx, p.o.RequestID(ctx))
		p.answers[redirect].Inc()
	case p.o.Challenge(ctx, path): // ACME HTTP-01; not found unless an order is under way
	default:
		p.o.Respond.Write(ctx, p.o.NotFound, 0)
		respond.Common(ctx, p.o.RequestID(ctx))
		p.answers[notFound].Inc()
	}
}

// refuseAPI answers a request under /api/: 400 request_failed, never
// proxied; one that carried a key as refuseKey does.
func (p *Handler) refuseAPI(ctx *fasthttp.RequestCtx, key []byte) {
	if len(key) > 0 {
		p.refuseKey(ctx, key, apiRefused, "/api/")
		return
	}
	p.answers[apiRefused].Inc()
	p.o.Respond.Write(ctx, p.refusal, 0)
	respond.Common(ctx, p.o.RequestID(ctx))
}

// refuseKey answers a request that carried raw, a key, in clear text: 400
// request_failed saying the key is exposed, counted. A key whose MAC
// verifies is logged at WARN with its id (resolved: never the key) within
// the rate of access_log.refusals_per_second, past it summarised by where
// it was sent (where); one that does not is only counted, with no lookup,
// so that made-up keys sent at wire speed write no line.
func (p *Handler) refuseKey(ctx *fasthttp.RequestCtx, raw []byte, a answer, where string) {
	p.answers[a].Inc()
	p.exposed.Inc()
	rid := p.o.RequestID(ctx)
	p.o.Respond.Write(ctx, p.exposure, 0)
	respond.Common(ctx, rid)
	if !p.o.Keys.Signed(raw) {
		p.unverified.Inc()
		return
	}
	if !p.warnings.Admit(apierr.RequestFailed, where, fasthttp.StatusBadRequest, time.Now()) {
		return
	}
	attrs := []any{"request_id", string(rid), "client", p.o.Client(ctx), "method", string(ctx.Method()),
		"path", where}
	id, err := p.o.Keys.Authenticate(raw, rid, nil)
	if id != nil {
		attrs = append(attrs, "key_id", id.KeyID, "vendor_id", id.VendorID)
	} else {
		attrs = append(attrs, "key_id", "")
	}
	attrs = append(attrs, "key_status", keyStatus(err))
	p.o.Logger.Warn(keyWarning, attrs...)
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

// Error answers a request whose head or body the server refused: a body
// over the limit is answered from the headers like any other request (an
// API request with a key is told the key is exposed); anything else is 400
// validation_error.
func (p *Handler) Error(ctx *fasthttp.RequestCtx, err error) {
	ctx.SetConnectionClose()
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		p.Serve(ctx)
		return
	}
	p.o.Respond.Write(ctx, p.o.Malformed, 0)
	respond.Common(ctx, p.o.RequestID(ctx))
}

// FlushWarnings writes the summary of the key warnings not written in full,
// when due after every (or always, when force); nothing on a nil Handler
// (no http_listen).
func (p *Handler) FlushWarnings(force bool, every time.Duration) {
	if p != nil && (force || p.warnings.Due(every)) {
		p.warnings.Flush(p.o.Logger)
	}
}
