package main

import (
	"testing"

	"github.com/valyala/fasthttp"

	"vendorgate/shared/wire"
)

// The responder takes the gateway's usage flushes as the backend does (200
// with the internal token, 401 without): a 404 made every flush fail, and
// the gateways under measurement held each for a retry, which the
// vendor-count sweep then read as their RSS.
func TestResponderTakesUsageFlushes(t *testing.T) {
	r := &responder{token: []byte("internal")}
	post := func(token string) int {
		var ctx fasthttp.RequestCtx
		ctx.Request.Header.SetMethod(fasthttp.MethodPost)
		ctx.Request.SetRequestURI(wire.UsageFlushPath)
		if token != "" {
			ctx.Request.Header.Set(wire.HeaderInternalToken, token)
		}
		ctx.Request.SetBodyString(`{"gateway":"g","flush_id":"f","minute":1,"rows":[]}`)
		r.serve(&ctx)
		return ctx.Response.StatusCode()
	}
	if got := post("internal"); got != fasthttp.StatusOK {
		t.Errorf("a usage flush with the internal token: %d, want 200", got)
	}
	if got := post(""); got != fasthttp.StatusUnauthorized {
		t.Errorf("a usage flush without the token: %d, want 401", got)
	}
}
