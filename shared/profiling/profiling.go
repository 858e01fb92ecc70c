// Package profiling serves Go's runtime profiles (/debug/pprof/) on an
// admin listener behind its admin token, so that an SRE can take a CPU or
// heap profile from a production replica with `go tool pprof`. Without a
// token the profiles are off: a listener anyone on the network can reach
// is no place for a goroutine dump or a 30-second CPU profile on demand.
package profiling

import (
	"bytes"
	"net/http/pprof"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
	"github.com/valyala/fasthttp/pprofhandler"

	"vendorgate/shared/apierr"
	"vendorgate/shared/bearer"
	"vendorgate/shared/httpapi"
)

// Prefix is the path under which the profiles are served.
const Prefix = "/debug/pprof/"

// Handles reports whether path is one of the profiles' paths (the index
// /debug/pprof/ and everything below it).
func Handles(path []byte) bool { return bytes.HasPrefix(path, []byte(Prefix)) }

// Handler serves the profiles to a request that carries
// `Authorization: Bearer TOKEN`; realm names the listener in the 401's
// WWW-Authenticate, setting the token's setting in its message. An empty token turns the profiles off (404), a missing
// or wrong one answers 401, another method than GET 405.
func Handler(token, realm, setting string) fasthttp.RequestHandler {
	want := []byte(token)
	// fasthttp's handler answers 404 to any path ending in '/', the
	// index /debug/pprof/ among them: the index is served here.
	index := fasthttpadaptor.NewFastHTTPHandlerFunc(pprof.Index)
	return func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.Set("Cache-Control", "no-store")
		switch {
		case token == "":
			write(ctx, apierr.New(apierr.NotFound, "profiling is off: set the admin token"))
		case !bearer.Matches(&ctx.Request.Header, want):
			httpapi.RefuseAdminToken(ctx, realm, setting)
		case !ctx.IsGet():
			ctx.Response.Header.Set("Allow", "GET")
			write(ctx, apierr.New(apierr.MethodNotAllowed, "use GET"))
		case string(ctx.Path()) == Prefix:
			index(ctx)
		default:
			pprofhandler.PprofHandler(ctx)
		}
	}
}

func write(ctx *fasthttp.RequestCtx, e *apierr.Error) { httpapi.WriteJSON(ctx, e.Status(), e.Body()) }
