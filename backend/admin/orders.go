package admin

import (
	"bytes"
	"context"
	"encoding/base64"
	"slices"
	"strings"

	"github.com/valyala/fasthttp"

	"vendorgate/backend/audit"
	"vendorgate/backend/orders"
	"vendorgate/backend/request"
	"vendorgate/backend/respond"
	"vendorgate/backend/store"
	"vendorgate/shared/apierr"
	"vendorgate/shared/wire"
)

// orderAction is the body of the release, complete and fail routes.
type orderAction struct {
	Service         string              `json:"service"`
	Reason          string              `json:"reason"`
	ReportPDFBase64 string              `json:"report_pdf_base64"`
	Result          *wire.ReviewsResult `json:"result"`
}

// OrderAnswer is what every admin order route answers.
type OrderAnswer struct {
	VendorID string      `json:"vendor_id"`
	Order    *wire.Order `json:"order"`
}

// recordOrder records an order action that succeeded (err nil): ids only,
// the order's vendor, the order and the service acted on.
func (a *API) recordOrder(c context.Context, ctx *fasthttp.RequestCtx, action, vendorID, orderID, service string, err error) {
	if err != nil {
		return
	}
	a.record(c, ctx, store.AuditRecord{Action: action, VendorID: vendorID, OrderID: orderID, Service: service})
}

func (a *API) orderAnswer(ctx *fasthttp.RequestCtx, vendorID string, o *wire.Order, err error) {
	if err != nil {
		a.error(ctx, err)
		return
	}
	respond.JSON(ctx, fasthttp.StatusOK, OrderAnswer{VendorID: vendorID, Order: o})
}

// queueParams are the parameters of the staff's order list: a misspelt one
// is refused, not ignored into a list that looks filtered.
var queueParams = queryParams{what: "list", names: []string{"status", "reason", "vendor_id", "since", "limit", "cursor"}}

// queryParams are the query parameters of a list or report: what names
// its kind in the refusal of a misspelt one.
type queryParams struct {
	what  string
	names []string
}

// check is each parameter of args that is not one of p's ("not a
// parameter of this list (...)"), and with refuseEmpty each of p's sent
// empty; none: an empty map.
func (p queryParams) check(args *fasthttp.Args, refuseEmpty bool) map[string]string {
	bad := map[string]string{}
	for k, v := range args.All() {
		if !slices.Contains(p.names, string(k)) {
			bad[string(k)] = "not a parameter of this " + p.what + " (" + strings.Join(p.names, ", ") + ")"
		} else if refuseEmpty && len(v) == 0 {
			bad[string(k)] = "empty"
		}
	}
	return bad
}

// listOrders is the staff's order list: every vendor's orders, newest
// first, narrowed by status, hold reason, vendor and placement time.
func (a *API) listOrders(ctx *fasthttp.RequestCtx) {
	args := ctx.QueryArgs()
	unknown := queueParams.check(args, false)
	if len(unknown) > 0 {
		e := apierr.New(apierr.ValidationError, "the request is not valid; see fields")
		e.Fields = unknown
		a.error(ctx, e)
		return
	}
	q := orders.QueueQuery{Status: string(args.Peek("status")), Reason: string(args.Peek("reason")),
		VendorID: string(args.Peek("vendor_id")), Since: string(args.Peek("since")),
		Limit: string(args.Peek("limit")), Cursor: string(args.Peek("cursor"))}
	c, cancel := request.Context()
	defer cancel()
	page, err := a.o.Orders.Queue(c, q)
	if err != nil {
		a.error(ctx, err)
		return
	}
	respond.JSON(ctx, fasthttp.StatusOK, page)
}

func (a *API) getOrder(ctx *fasthttp.RequestCtx) {
	c, cancel := request.Context()
	defer cancel()
	v, o, err := a.o.Orders.AdminGet(c, param(ctx, "order_id"))
	a.orderAnswer(ctx, v, o, err)
}

func (a *API) release(ctx *fasthttp.RequestCtx) {
	var req orderAction
	if err := decode(ctx, &req); err != nil {
		a.error(ctx, err)
		return
	}
	c, cancel := request.Context()
	defer cancel()
	v, o, err := a.o.Orders.Release(c, param(ctx, "order_id"), req.Service)
	a.recordOrder(c, ctx, audit.OrderReleased, v, param(ctx, "order_id"), req.Service, err)
	a.orderAnswer(ctx, v, o, err)
}

func (a *API) complete(ctx *fasthttp.RequestCtx) {
	var req orderAction
	if err := decode(ctx, &req); err != nil {
		a.error(ctx, err)
		return
	}
	c, cancel := request.Context()
	defer cancel()
	var pdf []byte
	if req.ReportPDFBase64 != "" {
		b, err := base64.StdEncoding.DecodeString(req.ReportPDFBase64)
		if err != nil || !bytes.HasPrefix(b, []byte("%PDF-")) {
			e := apierr.New(apierr.ValidationError, "the request is not valid")
			e.Fields = map[string]string{"report_pdf_base64": "must be a PDF file in standard base64"}
			a.error(ctx, e)
			return
		}
		pdf = b
	}
	v, o, err := a.o.Orders.Complete(c, param(ctx, "order_id"), req.Service, pdf, req.Result)
	a.recordOrder(c, ctx, audit.OrderCompleted, v, param(ctx, "order_id"), req.Service, err)
	a.orderAnswer(ctx, v, o, err)
}

func (a *API) fail(ctx *fasthttp.RequestCtx) {
	var req orderAction
	if err := decode(ctx, &req); err != nil {
		a.error(ctx, err)
		return
	}
	c, cancel := request.Context()
	defer cancel()
	v, o, err := a.o.Orders.Fail(c, param(ctx, "order_id"), req.Service, req.Reason)
	a.recordOrder(c, ctx, audit.OrderFailed, v, param(ctx, "order_id"), req.Service, err)
	a.orderAnswer(ctx, v, o, err)
}

func (a *API) deleteOrder(ctx *fasthttp.RequestCtx) {
	c, cancel := request.Context()
	defer cancel()
	v, o, err := a.o.Orders.Delete(c, param(ctx, "order_id"))
	a.recordOrder(c, ctx, audit.OrderDeleted, v, param(ctx, "order_id"), "", err)
	a.orderAnswer(ctx, v, o, err)
}
