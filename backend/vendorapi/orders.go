package vendorapi

import (
	"context"
	"errors"
	"mime"
	"os"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"

	"vendorgate/backend/audit"
	"vendorgate/backend/request"
	"vendorgate/backend/respond"
	"vendorgate/backend/store"
	"vendorgate/shared/apierr"
	"vendorgate/shared/idleconn"
	"vendorgate/shared/logtext"
	"vendorgate/shared/wire"
)

type orderService interface {
	Place(ctx context.Context, v *store.Vendor, idemKey string, body []byte) (*wire.Order, error)
	Get(ctx context.Context, vendorID, orderID string) (*wire.Order, error)
	List(ctx context.Context, vendorID, limit, cursor string) (*wire.OrderList, error)
	Report(ctx context.Context, vendorID, orderID, service string) (*os.File, int64, error)
}

func param(ctx *fasthttp.RequestCtx, name string) string {
	s, _ := ctx.UserValue(name).(string)
	return s
}

// answerOrder writes an order: 202 with Retry-After while it runs, 200 once
// final; Location either way.
func answerOrder(ctx *fasthttp.RequestCtx, o *wire.Order, status int) {
	ctx.Response.Header.Set("Location", o.Poll.URL)
	if !o.Final {
		after := o.Poll.AfterSeconds
		if after < 1 {
			after = 1
		}
		ctx.Response.Header.Set("Retry-After", strconv.Itoa(after))
	}
	respond.JSON(ctx, status, o)
}

func (a *API) fail(ctx *fasthttp.RequestCtx, err error) {
	var ae *apierr.Error
	if errors.As(err, &ae) && ae.Code == apierr.InProgress {
		ctx.Response.Header.Set("Retry-After", "1")
	}
	respond.Error(ctx, a.o.Logger, err)
}

// isJSON accepts application/json with any parameters (charset).
func isJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && strings.EqualFold(mt, "application/json")
}

func (a *API) placeOrder(ctx *fasthttp.RequestCtx) {
	c, cancel := request.ContextOf(ctx)
	defer cancel()
	v, err := a.caller(c, ctx)
	if err != nil {
		a.fail(ctx, err)
		return
	}
	if v.Status == wire.VendorSuspended {
		a.fail(ctx, apierr.New(apierr.AccountSuspended, "this account is suspended: orders are refused, results can still be read"))
		return
	}
	if len(ctx.PostBody()) > a.o.MaxBodyBytes {
		a.fail(ctx, apierr.New(apierr.PayloadTooLarge, "the request body is larger than %d bytes", a.o.MaxBodyBytes))
		return
	}
	if !isJSON(string(ctx.Request.Header.ContentType())) {
		a.fail(ctx, apierr.New(apierr.UnsupportedMediaType, "send the order as application/json"))
		return
	}
	o, err := a.o.Orders.Place(c, v, string(ctx.Request.Header.Peek(wire.HeaderIdempotency)), ctx.PostBody())
	if err != nil {
		a.fail(ctx, err)
		return
	}
	answerOrder(ctx, o, fasthttp.StatusAccepted)
}

func (a *API) getOrder(ctx *fasthttp.RequestCtx) {
	c, cancel := request.ContextOf(ctx)
	defer cancel()
	v, err := a.caller(c, ctx)
	if err != nil {
		a.fail(ctx, err)
		return
	}
	o, err := a.o.Orders.Get(c, v.ID, param(ctx, "order_id"))
	if err != nil {
		a.fail(ctx, err)
		return
	}
	status := fasthttp.StatusAccepted
	if o.Final {
		status = fasthttp.StatusOK
	}
	answerOrder(ctx, o, status)
}

func (a *API) listOrders(ctx *fasthttp.RequestCtx) {
	c, cancel := request.ContextOf(ctx)
	defer cancel()
	v, err := a.caller(c, ctx)
	if err != nil {
		a.fail(ctx, err)
		return
	}
	args := ctx.QueryArgs()
	list, err := a.o.Orders.List(c, v.ID, string(args.Peek("limit")), string(args.Peek("cursor")))
	if err != nil {
		a.fail(ctx, err)
		return
	}
	respond.JSON(ctx, fasthttp.StatusOK, list)
}

// getReport streams a report PDF; the file is closed by fasthttp once sent.
func (a *API) getReport(ctx *fasthttp.RequestCtx) {
	c, cancel := request.ContextOf(ctx)
	defer cancel()
	v, err := a.caller(c, ctx)
	if err != nil {
		a.fail(ctx, err)
		return
	}
	service := param(ctx, "service")
	f, size, err := a.o.Orders.Report(c, v.ID, param(ctx, "order_id"), service)
	if err != nil {
		a.fail(ctx, err)
		return
	}
	// Every report download is in the audit trail: none is served unrecorded.
	rec := store.AuditRecord{Actor: audit.Vendor, Action: audit.ReportDownloaded, VendorID: v.ID,
		KeyID: logtext.Header(ctx.Request.Header.Peek(wire.HeaderKeyID)), OrderID: param(ctx, "order_id"), Service: service,
		Address: logtext.Header(ctx.Request.Header.Peek(wire.HeaderForwardedFor)), RequestID: respond.RequestID(ctx)}
	if err := a.o.Audit.Record(c, rec); err != nil {
		f.Close()
		a.fail(ctx, err)
		return
	}
	ctx.Response.Header.Set("Cache-Control", "no-store")
	ctx.Response.Header.Set("Content-Disposition", `inline; filename="`+service+`.pdf"`)
	ctx.SetContentType("application/pdf")
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetBodyStream(f, int(size))
	// A slow reader of a large file outlasts the listener's whole-answer
	// write timeout: bound this answer by progress instead.
	idleconn.Stream(ctx)
}
