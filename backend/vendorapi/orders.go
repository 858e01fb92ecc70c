package vendorapi

import (
	"github.com/valyala/fasthttp"
)

type orderService interface{}

func (a *API) listOrders(ctx *fasthttp.RequestCtx) {}
func (a *API) placeOrder(ctx *fasthttp.RequestCtx) {}
func (a *API) getOrder(ctx *fasthttp.RequestCtx)   {}
func (a *API) getReport(ctx *fasthttp.RequestCtx)  {}
