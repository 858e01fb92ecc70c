// Package vendorapi serves the vendor API behind the gateway: the caller is
// the vendor named by X-Vendor-Id, which only the gateway sets (the
// internal-token guard runs first).
package vendorapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"

	"vendorgate/backend/audit"
	"vendorgate/backend/request"
	"vendorgate/backend/respond"
	"vendorgate/backend/store"
	"vendorgate/shared/apierr"
	"vendorgate/shared/wire"
)

type vendorLookup interface {
	Get(ctx context.Context, id string) (*store.Vendor, error)
}

// Options configure the vendor API.
type Options struct {
	Vendors vendorLookup
	// Orders serves the order routes; nil leaves them out.
	Orders orderService
	// Audit records every report download. Required with Orders.
	Audit *audit.Log
	// MaxBodyBytes bounds an order body (413 past it). Required: the
	// backend passes config's max_body_bytes.
	MaxBodyBytes int
	Logger       *slog.Logger
}

// API is the vendor API.
type API struct {
	o Options
}

// New returns the vendor API.
func New(o Options) (*API, error) {
	if o.Orders != nil && o.Audit == nil {
		return nil, errors.New("vendorapi: no audit log for the report downloads")
	}
	if o.MaxBodyBytes <= 0 {
		return nil, fmt.Errorf("vendorapi: max body bytes %d must be positive", o.MaxBodyBytes)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &API{o: o}, nil
}

// Register adds the vendor routes to r, each wrapped by guard.
func (a *API) Register(r *router.Router, guard func(fasthttp.RequestHandler) fasthttp.RequestHandler) {
	r.GET("/api/vendor/v1/me", guard(a.me))
	if a.o.Orders != nil {
		r.GET("/api/vendor/v1/orders", guard(a.listOrders))
		r.POST("/api/vendor/v1/orders", guard(a.placeOrder))
		r.GET("/api/vendor/v1/orders/{order_id}", guard(a.getOrder))
		r.GET("/api/vendor/v1/orders/{order_id}/reports/{service}", guard(a.getReport))
	}
}

// caller returns the vendor named by X-Vendor-Id. A vendor that does not
// exist is refused like a bad key; one not approved yet answers
// account_not_approved (the gateway refuses it first; this is the backstop).
func (a *API) caller(c context.Context, ctx *fasthttp.RequestCtx) (*store.Vendor, error) {
	id := string(ctx.Request.Header.Peek(wire.HeaderVendorID))
	if id == "" {
		return nil, apierr.New(apierr.InvalidAPIKey, "no vendor identity")
	}
	v, err := a.o.Vendors.Get(c, id)
	if err != nil {
		var ae *apierr.Error
		if errors.As(err, &ae) && ae.Code == apierr.NotFound {
			return nil, apierr.New(apierr.InvalidAPIKey, "unknown vendor")
		}
		return nil, err
	}
	if v.Status == wire.VendorPending {
		return nil, apierr.New(apierr.AccountNotApproved, "staff have not approved this account yet")
	}
	return v, nil
}

func (a *API) me(ctx *fasthttp.RequestCtx) {
	c, cancel := request.ContextOf(ctx)
	defer cancel()
	v, err := a.caller(c, ctx)
	if err != nil {
		respond.Error(ctx, a.o.Logger, err)
		return
	}
	services := v.EnabledServices
	if services == nil {
		services = []string{}
	}
	respond.JSON(ctx, fasthttp.StatusOK, wire.Vendor{VendorID: v.ID, CompanyName: v.CompanyName,
		Environment: v.Environment, EnabledServices: services})
}
