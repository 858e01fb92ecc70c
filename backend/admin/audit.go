package admin

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"vendorgate/backend/audit"
	"vendorgate/backend/request"
	"vendorgate/backend/store"
	"vendorgate/shared/apierr"
)

// auditParams are the parameters of the audit list: a misspelt one is
// refused, not ignored into a list that looks filtered.
var auditParams = queryParams{what: "list", names: []string{"vendor_id", "order_id", "action", "since", "limit"}}

// Audit list bounds.
const (
	defaultAuditLimit = 100
	maxAuditLimit     = 1000
)

// listAudit answers GET /admin/v1/audit: the records vendor_id, order_id,
// action and since (RFC 3339) select, newest first, at most limit (100 by
// default, up to 1000). It only reads: no admin route changes a record.
func (a *API) listAudit(ctx *fasthttp.RequestCtx) {
	args := ctx.QueryArgs()
	bad := auditParams.check(args, true)
	f := store.AuditFilter{VendorID: string(args.Peek("vendor_id")), OrderID: string(args.Peek("order_id")),
		Action: string(args.Peek("action")), Limit: defaultAuditLimit}
	if f.Action != "" && !slices.Contains(audit.Actions, f.Action) {
		bad["action"] = fmt.Sprintf("one of %v", audit.Actions)
	}
	if s := args.Peek("since"); len(s) > 0 {
		t, err := time.Parse(time.RFC3339, string(s))
		if err != nil {
			bad["since"] = "an RFC 3339 time, such as 2026-11-01T00:00:00Z"
		}
		f.Since = t
	}
	if s := args.Peek("limit"); len(s) > 0 {
		n, err := strconv.Atoi(string(s))
		if err != nil || n < 1 || n > maxAuditLimit || s[0] == '+' {
			bad["limit"] = fmt.Sprintf("1 to %d", maxAuditLimit)
		}
		f.Limit = n
	}
	if len(bad) > 0 {
		e := apierr.New(apierr.ValidationError, "the request is not valid; see fields")
		e.Fields = bad
		a.error(ctx, e)
		return
	}
	c, cancel := request.Context()
	defer cancel()
	rs, err := a.o.Audit.List(c, f)
	listAnswer(a, ctx, "records", rs, err, audit.View)
}
