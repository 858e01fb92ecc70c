package admin

import (
	"context"

	"github.com/valyala/fasthttp"

	"vendorgate/backend/billing"
	"vendorgate/backend/request"
	"vendorgate/backend/respond"
	"vendorgate/shared/apierr"
)

type billingService interface {
	Month(ctx context.Context, vendorID string, m billing.Month) (*billing.MonthReport, error)
}

// usageMonthParams are the parameters of the month report.
var usageMonthParams = queryParams{what: "report", names: []string{"month", "vendor_id"}}

// usageMonth answers GET /admin/v1/usage/month?month=YYYY-MM[&vendor_id=]:
// a vendor's month (404 not_found for an unknown vendor), or every
// vendor's that used anything in it; the month defaults to the current one
// (UTC).
func (a *API) usageMonth(ctx *fasthttp.RequestCtx) {
	args := ctx.QueryArgs()
	bad := usageMonthParams.check(args, true)
	m := billing.MonthOf(a.o.Now())
	if s := args.Peek("month"); len(s) > 0 {
		var err error
		if m, err = billing.ParseMonth(string(s)); err != nil {
			bad["month"] = "a month as YYYY-MM, such as 2026-11"
		}
	}
	if len(bad) > 0 {
		e := apierr.New(apierr.ValidationError, "the request is not valid; see fields")
		e.Fields = bad
		a.error(ctx, e)
		return
	}
	c, cancel := request.Context()
	defer cancel()
	r, err := a.o.Billing.Month(c, string(args.Peek("vendor_id")), m)
	if err != nil {
		a.error(ctx, err)
		return
	}
	respond.JSON(ctx, fasthttp.StatusOK, r)
}
