package admin

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"

	"vendorgate/gateway/usage"
	"vendorgate/shared/apierr"
	"vendorgate/shared/bearer"
	"vendorgate/shared/httpapi"
)

// UsageOptions configures the usage view of the admin listener.
type UsageOptions struct {
	// Token is the bearer token the view asks for; empty turns the view off
	// (403): traffic per vendor is not for whoever reaches the port.
	Token string
	// Reader answers the view.
	Reader *usage.Reader
}

// GatewayAdminToken names the gateway admin listener's token in a refusal.
const GatewayAdminToken = "this gateway's admin_token (GATEWAY_ADMIN_TOKEN)"

// UsageHandler serves GET /usage?window=1h&top=20 and
// GET /usage/{vendor_id}?window=1h.
func UsageHandler(o UsageOptions) fasthttp.RequestHandler {
	want := []byte(o.Token)
	return func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.Set("Cache-Control", "no-store")
		if o.Token == "" || o.Reader == nil {
			writeError(ctx, apierr.New(apierr.PermissionDenied, "the usage view is off: set the gateway's admin_token (GATEWAY_ADMIN_TOKEN)"))
			return
		}
		if !bearer.Matches(&ctx.Request.Header, want) {
			httpapi.RefuseAdminToken(ctx, "vendorgate-gateway-admin", GatewayAdminToken)
			return
		}
		if !ctx.IsGet() {
			ctx.Response.Header.Set("Allow", "GET")
			writeError(ctx, apierr.New(apierr.MethodNotAllowed, "use GET"))
			return
		}
		args := ctx.QueryArgs()
		window, err := usage.ParseWindow(string(args.Peek("window")))
		if err != nil {
			writeError(ctx, &apierr.Error{Code: apierr.ValidationError, Message: "the query is not valid",
				Fields: map[string]string{"window": "whole minutes from 1m to 24h, e.g. 15m, 1h, 24h"}})
			return
		}
		path := string(ctx.Path())
		if path == "/usage" {
			top := 20
			if s := args.Peek("top"); len(s) > 0 {
				top, err = strconv.Atoi(string(s))
				if err != nil || top < 1 || top > 1000 {
					writeError(ctx, &apierr.Error{Code: apierr.ValidationError, Message: "the query is not valid",
						Fields: map[string]string{"top": "a whole number from 1 to 1000"}})
					return
				}
			}
			t, err := o.Reader.Top(window, top)
			writeJSON(ctx, t, err)
			return
		}
		vendor := strings.TrimPrefix(path, "/usage/")
		if vendor == "" || strings.Contains(vendor, "/") {
			writeError(ctx, apierr.New(apierr.NotFound, "no such path"))
			return
		}
		v, _, err := o.Reader.Vendor(vendor, window)
		writeJSON(ctx, v, err)
	}
}

func writeJSON(ctx *fasthttp.RequestCtx, v any, err error) {
	if err != nil {
		writeError(ctx, &apierr.Error{Code: apierr.RequestFailed, Message: "usage store unavailable: " + err.Error(), HTTPStatus: http.StatusServiceUnavailable})
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		writeError(ctx, apierr.New(apierr.InternalError, "encode the answer"))
		return
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

func writeError(ctx *fasthttp.RequestCtx, e *apierr.Error) {
	ctx.SetStatusCode(e.Status())
	ctx.SetContentType("application/json")
	ctx.SetBody(e.Body())
}
