// Package internalapi is what only the gateway may call: the internal-token
// guard in front of every /api/vendor/ and /internal/ route, and key
// resolution by hash.
package internalapi

import (
	"bytes"
	"context"
	"crypto/subtle"
	"log/slog"

	"github.com/valyala/fasthttp"

	"vendorgate/backend/request"
	"vendorgate/backend/respond"
	"vendorgate/shared/apierr"
	"vendorgate/shared/wire"
)

type resolver interface {
	Resolve(ctx context.Context, hash string) (*wire.KeyResolution, error)
}

// API serves the internal routes.
type API struct {
	token []byte
	keys  resolver
	log   *slog.Logger
}

// New returns the internal API; token is what the gateway must send.
func New(token string, keys resolver, log *slog.Logger) *API {
	return &API{token: []byte(token), keys: keys, log: log}
}

// Guard refuses a call without the right X-Internal-Token with 401
// invalid_api_key, so the vendor API cannot be reached around the gateway.
// The compare takes constant time.
func (a *API) Guard(h fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		if !a.FromGateway(ctx) {
			respond.Error(ctx, a.log, apierr.New(apierr.InvalidAPIKey, "internal token required"))
			return
		}
		if name := repeatedIdentity(&ctx.Request.Header); name != "" {
			e := apierr.New(apierr.ValidationError, "%s was sent more than once", name)
			e.Fields = map[string]string{name: "sent more than once"}
			respond.Error(ctx, a.log, e)
			return
		}
		h(ctx)
	}
}

// FromGateway reports whether the request carries the internal token: a
// call of the gateway's, whose identity headers and trace context (its
// sampling decision, its tracestate) the backend follows. The compare
// takes constant time.
func (a *API) FromGateway(ctx *fasthttp.RequestCtx) bool {
	got := ctx.Request.Header.Peek(wire.HeaderInternalToken)
	return len(got) > 0 && subtle.ConstantTimeCompare(got, a.token) == 1
}

// singleHeaders name the caller; the gateway sends each once, so a second
// copy was forged by a client and the request is refused rather than
// trusting either.
var singleHeaders = []string{wire.HeaderVendorID, wire.HeaderKeyID, wire.HeaderEnvironment}

// repeatedIdentity is the first of singleHeaders present more than once
// (in any spelling), or "".
func repeatedIdentity(h *fasthttp.RequestHeader) string {
	var seen [3]int
	for k := range h.All() {
		for i, name := range singleHeaders {
			if len(k) == len(name) && bytes.EqualFold(k, []byte(name)) {
				seen[i]++
			}
		}
	}
	for i, n := range seen {
		if n > 1 {
			return singleHeaders[i]
		}
	}
	return ""
}

// LookupKey answers GET /internal/v1/keys/{hash}: the key and its vendor,
// revoked and expired keys included; 404 not_found when no key has the hash.
func (a *API) LookupKey(ctx *fasthttp.RequestCtx) {
	hash, _ := ctx.UserValue("hash").(string)
	c, cancel := request.Context()
	defer cancel()
	res, err := a.keys.Resolve(c, hash)
	if err != nil {
		respond.Error(ctx, a.log, err)
		return
	}
	respond.JSON(ctx, fasthttp.StatusOK, res)
}
