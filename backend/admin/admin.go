// Package admin is the operator API that vendorctl calls (bearer admin
// token) and the SRE endpoints /healthz, /readyz and /metrics (no token),
// all on the backend's admin listener. Shapes follow docs/CONTRACTS.md.
package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/fasthttp/router"
	"github.com/google/uuid"
	"github.com/valyala/fasthttp"

	"vendorgate/backend/audit"
	"vendorgate/backend/orders"
	"vendorgate/backend/request"
	"vendorgate/backend/respond"
	"vendorgate/backend/store"
	"vendorgate/shared/apierr"
	"vendorgate/shared/bearer"
	"vendorgate/shared/httpapi"
	"vendorgate/shared/profiling"
	"vendorgate/shared/readyz"
	"vendorgate/shared/wire"
)

type vendorService interface {
	Create(ctx context.Context, company, environment string, services []string) (*store.Vendor, error)
	Get(ctx context.Context, id string) (*store.Vendor, error)
	List(ctx context.Context) ([]*store.Vendor, error)
	SetStatus(ctx context.Context, id, action string) (v *store.Vendor, published bool, err error)
	SetServices(ctx context.Context, id string, services []string) (v *store.Vendor, published bool, err error)
	IssueKey(ctx context.Context, vendorID string, lifetime time.Duration) (string, *store.Key, error)
	ListKeys(ctx context.Context, vendorID string) ([]*store.Key, error)
	RevokeKey(ctx context.Context, keyID string) (k *store.Key, published bool, err error)
	RotateKey(ctx context.Context, keyID string, overlap time.Duration) (raw string, old, next *store.Key, published bool, err error)
	ExpiringKeys(ctx context.Context, within time.Duration) ([]*store.Key, error)
}

type orderService interface {
	AdminGet(ctx context.Context, id string) (vendorID string, o *wire.Order, err error)
	Queue(ctx context.Context, q orders.QueueQuery) (*orders.QueuePage, error)
	Release(ctx context.Context, id, service string) (string, *wire.Order, error)
	Complete(ctx context.Context, id, service string, pdf []byte, result *wire.ReviewsResult) (string, *wire.Order, error)
	Fail(ctx context.Context, id, service, reason string) (string, *wire.Order, error)
	Delete(ctx context.Context, id string) (string, *wire.Order, error)
}

type pinger interface {
	Ping(ctx context.Context) error
}

// Token is one admin token and the name the audit trail gives whoever
// sends it.
type Token struct {
	Name, Token string
}

// Options configure the admin API.
type Options struct {
	// Tokens are what vendorctl may send as "Authorization: Bearer
	// <token>"; the audit trail records the name of the one sent. At
	// least one is required.
	Tokens []Token
	// Audit records every admin action. Required.
	Audit   *audit.Log
	Vendors vendorService
	Orders  orderService
	// Invalidates says whether the backend publishes key and vendor changes
	// through Redis, so that every gateway drops its cached entry at once;
	// false: a gateway keeps serving a revoked key until its cached entry
	// expires (its key_cache.ttl). The answers of the actions that announce
	// a change say which, and whether the announcement was published.
	Invalidates bool
	// DB is checked by /readyz.
	DB pinger
	// Billing answers the month report; nil: no such route.
	Billing billingService
	// Now is the clock of the month report's default month; required
	// with Billing.
	Now func() time.Time
	// Metrics serves /metrics.
	Metrics fasthttp.RequestHandler
	Logger  *slog.Logger
}

// API is the admin API.
type API struct {
	o Options
	// profiles serve the runtime profiles, one per token (profiling takes
	// one token).
	profiles []fasthttp.RequestHandler
}

// New returns the admin API.
func New(o Options) (*API, error) {
	if len(o.Tokens) == 0 {
		return nil, errors.New("admin: no admin token")
	}
	for _, t := range o.Tokens {
		if t.Name == "" || t.Token == "" {
			return nil, errors.New("admin: an admin token with no name or no secret")
		}
	}
	if o.Audit == nil {
		return nil, errors.New("admin: no audit log")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Billing != nil && o.Now == nil {
		return nil, errors.New("admin: the month report needs a clock")
	}
	a := &API{o: o}
	for _, t := range o.Tokens {
		a.profiles = append(a.profiles, profiling.Handler(t.Token, "vendorgate-backend-admin", "this backend's admin_token (BACKEND_ADMIN_TOKEN)"))
	}
	return a, nil
}

// profile serves a profile to the holder of any admin token.
func (a *API) profile(ctx *fasthttp.RequestCtx) {
	i, _ := a.who(&ctx.Request.Header)
	a.profiles[max(i, 0)](ctx)
}

// Register adds every admin route to r.
func (a *API) Register(r *router.Router) {
	r.GET("/healthz", func(ctx *fasthttp.RequestCtx) { respond.JSON(ctx, 200, map[string]string{"status": "ok"}) })
	r.GET("/readyz", a.Readyz)
	if a.o.Metrics != nil {
		r.GET("/metrics", a.o.Metrics)
	}
	// Go's runtime profiles, behind the admin token like the admin API.
	r.GET(profiling.Prefix+"{profile:*}", a.profile)
	g := func(method, path string, h fasthttp.RequestHandler) { r.Handle(method, path, a.auth(h)) }
	g("POST", "/admin/v1/vendors", a.createVendor)
	g("GET", "/admin/v1/vendors", a.listVendors)
	g("GET", "/admin/v1/vendors/{vendor_id}", a.getVendor)
	for _, action := range []string{"approve", "suspend", "reinstate"} {
		g("POST", "/admin/v1/vendors/{vendor_id}/"+action, a.setStatus(action))
	}
	g("PUT", "/admin/v1/vendors/{vendor_id}/services", a.setServices)
	g("POST", "/admin/v1/vendors/{vendor_id}/keys", a.issueKey)
	g("GET", "/admin/v1/vendors/{vendor_id}/keys", a.listKeys)
	g("POST", "/admin/v1/keys/{key_id}/revoke", a.revokeKey)
	g("POST", "/admin/v1/keys/{key_id}/rotate", a.rotateKey)
	g("GET", "/admin/v1/keys", a.expiringKeys)
	g("GET", "/admin/v1/audit", a.listAudit)
	if a.o.Billing != nil {
		g("GET", "/admin/v1/usage/month", a.usageMonth)
	}
	if a.o.Orders != nil {
		g("GET", "/admin/v1/orders", a.listOrders)
		g("GET", "/admin/v1/orders/{order_id}", a.getOrder)
		g("POST", "/admin/v1/orders/{order_id}/release", a.release)
		g("POST", "/admin/v1/orders/{order_id}/complete", a.complete)
		g("POST", "/admin/v1/orders/{order_id}/fail", a.fail)
		g("DELETE", "/admin/v1/orders/{order_id}", a.deleteOrder)
	}
}

// actorKey is the request's user value that holds the name of the admin
// token it sent.
const actorKey = "vendorgate.admin_actor"

func (a *API) auth(h fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		i, ok := a.who(&ctx.Request.Header)
		if !ok {
			a.refuse(ctx)
			return
		}
		ctx.SetUserValue(actorKey, a.o.Tokens[i].Name)
		h(ctx)
	}
}

// who returns the index of the admin token h carries. Every token is
// compared (in constant time each), so that which one matched does not
// show in the time taken.
func (a *API) who(h *fasthttp.RequestHeader) (int, bool) {
	found := -1
	for i, t := range a.o.Tokens {
		if bearer.Matches(h, []byte(t.Token)) && found < 0 {
			found = i
		}
	}
	return found, found >= 0
}

func (a *API) authorized(h *fasthttp.RequestHeader) bool {
	_, ok := a.who(h)
	return ok
}

// record appends the audit record of an admin action that succeeded: who
// (the token's name), from which address, under which request id. The
// action is done: a record that cannot be written is logged at error
// level with everything it held, and the answer is not changed.
func (a *API) record(c context.Context, ctx *fasthttp.RequestCtx, r store.AuditRecord) {
	r.Actor, _ = ctx.UserValue(actorKey).(string)
	r.Address = ctx.RemoteIP().String()
	r.RequestID = respond.RequestID(ctx)
	if r.RequestID == "" {
		// vendorctl sends none: the record gets one, and the answer
		// carries it, so that the operator can name the record.
		r.RequestID = uuid.NewString()
		ctx.Response.Header.Set(wire.HeaderRequestID, r.RequestID)
	}
	if err := a.o.Audit.Record(c, r); err != nil {
		a.o.Logger.Error("audit record not written", "error", err, "action", r.Action, "actor", r.Actor,
			"vendor_id", r.VendorID, "key_id", r.KeyID, "order_id", r.OrderID, "service", r.Service,
			"address", r.Address, "request_id", r.RequestID)
	}
}

// refuse answers a request without the admin token: "required" when it
// sent none, "refused" when it sent another, so that an operator with a
// stale or mistyped token is not told to send one.
func (a *API) refuse(ctx *fasthttp.RequestCtx) {
	httpapi.RefuseAdminToken(ctx, "vendorgate-admin", "this backend's admin_token (BACKEND_ADMIN_TOKEN)")
}

// error answers err. The domain packages refuse a transition that is not
// allowed with request_failed and no status of their own: on this API that
// is a 409 (docs/CONTRACTS.md).
func (a *API) error(ctx *fasthttp.RequestCtx, err error) {
	var ae *apierr.Error
	if errors.As(err, &ae) && ae.Code == apierr.RequestFailed && ae.HTTPStatus == 0 {
		conflict := *ae
		conflict.HTTPStatus = fasthttp.StatusConflict
		err = &conflict
	}
	respond.Error(ctx, a.o.Logger, err)
}

// UnauthenticatedBodyBytes bounds the body of a request to the admin
// listener that does not carry the admin token.
const UnauthenticatedBodyBytes = 16 << 10

// HeaderReceived is the admin listener's fasthttp.Server.HeaderReceived,
// decided from the headers before any body byte is read: the holder of the
// token may send the listener's full limit (report PDFs in base64), anyone
// else UnauthenticatedBodyBytes. fasthttp sets aside memory for the whole
// announced Content-Length before reading it, so without this a client with
// no token could make the server hold 64 MiB per connection.
func (a *API) HeaderReceived(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
	if a.authorized(h) {
		return fasthttp.RequestConfig{}
	}
	return fasthttp.RequestConfig{MaxRequestBodySize: UnauthenticatedBodyBytes}
}

// ServerError is the admin listener's fasthttp.Server.ErrorHandler: a body
// over the limit from a request without the token is answered 401, as the
// handler would answer it, at once and without reading the body; the rest
// goes to respond.ServerErrorHandler. (A chunked body cut midway leaves no
// headers to judge by, and is a 413.)
func (a *API) ServerError(ctx *fasthttp.RequestCtx, err error) {
	if errors.Is(err, fasthttp.ErrBodyTooLarge) && ctx.Request.Header.ContentLength() > 0 && !a.authorized(&ctx.Request.Header) {
		a.refuse(ctx)
		return
	}
	respond.ServerErrorHandler(ctx, err)
}

// Readyz answers /readyz here and, behind the internal token, the gateway's
// readiness probe (wire.ReadyPath) on the internal listener. One named
// check, "database"; ?verbose lists it, ?exclude=database leaves it out
// (the Kubernetes API server's conventions, as on the gateway). The body
// keeps its shape: {"status":"ok"|"unavailable","database":"ok"|
// "unreachable"|"excluded"}, plus "checks" with ?verbose or on a 503.
func (a *API) Readyz(ctx *fasthttp.RequestCtx) {
	q := readyz.ParseQuery(ctx.QueryArgs())
	// Not ctx: fasthttp reuses a RequestCtx once the handler returns, and a
	// context derived from it would read it from another goroutine.
	r := readyz.Run(context.Background(), []readyz.Check{{Name: "database", Run: a.pingDB}}, q)
	body := map[string]any{"status": "ok", "database": "ok"}
	status := fasthttp.StatusOK
	if r.Results[0].Status == readyz.StatusExcluded {
		body["database"] = "excluded"
	}
	if !r.Ready() {
		a.o.Logger.Warn("readyz: database not reachable", "error", r.Results[0].Reason)
		status, body["status"], body["database"] = fasthttp.StatusServiceUnavailable, "unavailable", "unreachable"
	}
	if q.Verbose || !r.Ready() {
		body["checks"] = r.Results
	}
	if len(r.Warnings) > 0 {
		body["warnings"] = r.Warnings
	}
	respond.JSON(ctx, status, body)
}

func (a *API) pingDB(ctx context.Context) error {
	c, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := a.o.DB.Ping(c); err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	return nil
}

// Vendor is the admin vendor object.
type Vendor struct {
	VendorID        string    `json:"vendor_id"`
	CompanyName     string    `json:"company_name"`
	Environment     string    `json:"environment"`
	Status          string    `json:"status"`
	EnabledServices []string  `json:"enabled_services"`
	CreatedAt       time.Time `json:"created_at"`
}

func vendorJSON(v *store.Vendor) Vendor {
	s := v.EnabledServices
	if s == nil {
		s = []string{}
	}
	return Vendor{VendorID: v.ID, CompanyName: v.CompanyName, Environment: v.Environment, Status: v.Status,
		EnabledServices: s, CreatedAt: v.CreatedAt}
}

// Key is the admin key object: never the key itself. A rotation pairs two
// keys: the new one names the old (rotated_from), the old one its successor
// (replaced_by) and when the rotation revokes it (revoke_at); each is null
// otherwise.
type Key struct {
	KeyID       string     `json:"key_id"`
	VendorID    string     `json:"vendor_id"`
	Prefix      string     `json:"prefix"`
	CreatedAt   time.Time  `json:"created_at"`
	ExpiresAt   time.Time  `json:"expires_at"`
	RevokedAt   *time.Time `json:"revoked_at"`
	RotatedFrom *string    `json:"rotated_from"`
	ReplacedBy  *string    `json:"replaced_by"`
	RevokeAt    *time.Time `json:"revoke_at"`
}

func keyJSON(k *store.Key) Key {
	return Key{KeyID: k.ID, VendorID: k.VendorID, Prefix: k.Prefix, CreatedAt: k.CreatedAt, ExpiresAt: k.ExpiresAt, RevokedAt: k.RevokedAt,
		RotatedFrom: orNull(k.RotatedFrom), ReplacedBy: orNull(k.ReplacedBy), RevokeAt: k.RevokeAt}
}

// orNull is s, or nil for "".
func orNull(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// IssuedKey is the answer to a key issue: the only time the key is shown.
type IssuedKey struct {
	Key       string    `json:"key"`
	KeyID     string    `json:"key_id"`
	VendorID  string    `json:"vendor_id"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
}

func param(ctx *fasthttp.RequestCtx, name string) string {
	s, _ := ctx.UserValue(name).(string)
	return s
}

// decode reads an optional JSON body; an empty body leaves v as it is.
func decode(ctx *fasthttp.RequestCtx, v any) *apierr.Error {
	if len(ctx.PostBody()) == 0 {
		return nil
	}
	return request.Decode(ctx.PostBody(), v)
}

// listAnswer answers a list as {name: [...]}, each record as conv shows it,
// or err.
func listAnswer[R, J any](a *API, ctx *fasthttp.RequestCtx, name string, records []R, err error, conv func(R) J) {
	if err != nil {
		a.error(ctx, err)
		return
	}
	out := make([]J, 0, len(records))
	for _, r := range records {
		out = append(out, conv(r))
	}
	respond.JSON(ctx, fasthttp.StatusOK, map[string]any{name: out})
}

func (a *API) vendorAnswer(ctx *fasthttp.RequestCtx, status int, v *store.Vendor, err error) {
	if err != nil {
		a.error(ctx, err)
		return
	}
	respond.JSON(ctx, status, vendorJSON(v))
}

func (a *API) createVendor(ctx *fasthttp.RequestCtx) {
	var req struct {
		CompanyName     string   `json:"company_name"`
		Environment     string   `json:"environment"`
		EnabledServices []string `json:"enabled_services"`
	}
	if err := request.Decode(ctx.PostBody(), &req); err != nil {
		a.error(ctx, err)
		return
	}
	c, cancel := request.Context()
	defer cancel()
	v, err := a.o.Vendors.Create(c, req.CompanyName, req.Environment, req.EnabledServices)
	if err == nil {
		a.record(c, ctx, store.AuditRecord{Action: audit.VendorCreated, VendorID: v.ID})
	}
	a.vendorAnswer(ctx, fasthttp.StatusCreated, v, err)
}

func (a *API) listVendors(ctx *fasthttp.RequestCtx) {
	c, cancel := request.Context()
	defer cancel()
	vs, err := a.o.Vendors.List(c)
	listAnswer(a, ctx, "vendors", vs, err, vendorJSON)
}

func (a *API) getVendor(ctx *fasthttp.RequestCtx) {
	c, cancel := request.Context()
	defer cancel()
	v, err := a.o.Vendors.Get(c, param(ctx, "vendor_id"))
	a.vendorAnswer(ctx, fasthttp.StatusOK, v, err)
}

// statusActions are the audit actions of the vendor status routes.
var statusActions = map[string]string{"approve": audit.VendorApproved, "suspend": audit.VendorSuspended, "reinstate": audit.VendorReinstated}

func (a *API) setStatus(action string) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		c, cancel := request.Context()
		defer cancel()
		v, published, err := a.o.Vendors.SetStatus(c, param(ctx, "vendor_id"), action)
		if err == nil {
			a.record(c, ctx, store.AuditRecord{Action: statusActions[action], VendorID: v.ID})
		}
		a.vendorChangeAnswer(ctx, v, published, err)
	}
}

func (a *API) setServices(ctx *fasthttp.RequestCtx) {
	var req struct {
		EnabledServices []string `json:"enabled_services"`
	}
	if err := request.Decode(ctx.PostBody(), &req); err != nil {
		a.error(ctx, err)
		return
	}
	c, cancel := request.Context()
	defer cancel()
	v, published, err := a.o.Vendors.SetServices(c, param(ctx, "vendor_id"), req.EnabledServices)
	if err == nil {
		a.record(c, ctx, store.AuditRecord{Action: audit.VendorServices, VendorID: v.ID})
	}
	a.vendorChangeAnswer(ctx, v, published, err)
}

func (a *API) issueKey(ctx *fasthttp.RequestCtx) {
	var req struct {
		LifetimeSeconds int64 `json:"lifetime_seconds"`
	}
	if err := decode(ctx, &req); err != nil {
		a.error(ctx, err)
		return
	}
	if req.LifetimeSeconds < 0 {
		e := apierr.New(apierr.ValidationError, "the request is not valid")
		e.Fields = map[string]string{"lifetime_seconds": "must be positive"}
		a.error(ctx, e)
		return
	}
	c, cancel := request.Context()
	defer cancel()
	raw, k, err := a.o.Vendors.IssueKey(c, param(ctx, "vendor_id"), time.Duration(req.LifetimeSeconds)*time.Second)
	if err != nil {
		a.error(ctx, err)
		return
	}
	a.record(c, ctx, store.AuditRecord{Action: audit.KeyIssued, VendorID: k.VendorID, KeyID: k.ID})
	respond.JSON(ctx, fasthttp.StatusCreated, IssuedKey{Key: raw, KeyID: k.ID, VendorID: k.VendorID, CreatedAt: k.CreatedAt, ExpiresAt: k.ExpiresAt})
}

func (a *API) listKeys(ctx *fasthttp.RequestCtx) {
	c, cancel := request.Context()
	defer cancel()
	ks, err := a.o.Vendors.ListKeys(c, param(ctx, "vendor_id"))
	listAnswer(a, ctx, "keys", ks, err, keyJSON)
}

func (a *API) revokeKey(ctx *fasthttp.RequestCtx) {
	c, cancel := request.Context()
	defer cancel()
	k, published, err := a.o.Vendors.RevokeKey(c, param(ctx, "key_id"))
	if err != nil {
		a.error(ctx, err)
		return
	}
	a.record(c, ctx, store.AuditRecord{Action: audit.KeyRevoked, VendorID: k.VendorID, KeyID: k.ID})
	respond.JSON(ctx, fasthttp.StatusOK, RevokedKey{Key: keyJSON(k), Announcement: a.announcement(published)})
}

// RotatedKey is the answer to a rotation: the new key (the only time it is
// shown), with rotated_from naming the old one, and the old key as it is
// now, with its revoke_at (revoked_at too when the overlap was 0), and whether
// the gateways were told of it.
type RotatedKey struct {
	IssuedKey
	RotatedFrom string `json:"rotated_from"`
	OldKey      Key    `json:"old_key"`
	// Announcement says of the rotation's publish (with an overlap of 0,
	// of the old key's revocation) what a revocation's answer says.
	Announcement
}

func (a *API) rotateKey(ctx *fasthttp.RequestCtx) {
	var req struct {
		OverlapSeconds *int64 `json:"overlap_seconds"`
	}
	if err := request.Decode(ctx.PostBody(), &req); err != nil {
		a.error(ctx, err)
		return
	}
	if req.OverlapSeconds == nil || *req.OverlapSeconds < 0 || *req.OverlapSeconds > maxOverlapSeconds {
		e := apierr.New(apierr.ValidationError, "the request is not valid")
		e.Fields = map[string]string{"overlap_seconds": fmt.Sprintf("required: 0 (revoke the old key now) to %d seconds", maxOverlapSeconds)}
		a.error(ctx, e)
		return
	}
	c, cancel := request.Context()
	defer cancel()
	raw, old, next, published, err := a.o.Vendors.RotateKey(c, param(ctx, "key_id"), time.Duration(*req.OverlapSeconds)*time.Second)
	if err != nil {
		a.error(ctx, err)
		return
	}
	// key.rotated names the rotated (old) key, key.issued the new one.
	a.record(c, ctx, store.AuditRecord{Action: audit.KeyRotated, VendorID: old.VendorID, KeyID: old.ID})
	a.record(c, ctx, store.AuditRecord{Action: audit.KeyIssued, VendorID: next.VendorID, KeyID: next.ID})
	if old.RevokedAt != nil {
		a.record(c, ctx, store.AuditRecord{Action: audit.KeyRevoked, VendorID: old.VendorID, KeyID: old.ID})
	}
	respond.JSON(ctx, fasthttp.StatusCreated, RotatedKey{
		IssuedKey:   IssuedKey{Key: raw, KeyID: next.ID, VendorID: next.VendorID, CreatedAt: next.CreatedAt, ExpiresAt: next.ExpiresAt},
		RotatedFrom: old.ID, OldKey: keyJSON(old), Announcement: a.announcement(published)})
}

// expiringKeys answers GET /admin/v1/keys?expiring_within_seconds=N: every
// vendor's working keys that expire within N seconds, soonest first.
func (a *API) expiringKeys(ctx *fasthttp.RequestCtx) {
	args := ctx.QueryArgs()
	raw := string(args.Peek("expiring_within_seconds"))
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || n <= 0 || n > maxExpiringSeconds || args.Len() != 1 || raw[0] == '+' {
		e := apierr.New(apierr.ValidationError, "the request is not valid")
		e.Fields = map[string]string{"expiring_within_seconds": fmt.Sprintf("required, the only parameter: 1 to %d seconds", maxExpiringSeconds)}
		a.error(ctx, e)
		return
	}
	c, cancel := request.Context()
	defer cancel()
	ks, lerr := a.o.Vendors.ExpiringKeys(c, time.Duration(n)*time.Second)
	listAnswer(a, ctx, "keys", ks, lerr, keyJSON)
}

// maxExpiringSeconds bounds expiring_within_seconds: a year.
const maxExpiringSeconds = 366 * 24 * 3600

// maxOverlapSeconds bounds a rotation's overlap: 90 days, a key's default
// lifetime.
const maxOverlapSeconds = 90 * 24 * 3600

func (a *API) vendorChangeAnswer(ctx *fasthttp.RequestCtx, v *store.Vendor, published bool, err error) {
	if err != nil {
		a.error(ctx, err)
		return
	}
	respond.JSON(ctx, fasthttp.StatusOK, VendorChange{Vendor: vendorJSON(v), Announcement: a.announcement(published)})
}

// How the gateways learn of a change they cache (Announcement.Invalidation).
const (
	// InvalidationRedis: the backend published it through Redis; every
	// gateway subscribed to that Redis drops its cached entry at once.
	InvalidationRedis = "redis"
	// InvalidationCacheTTL: the backend has no Redis to publish on; each
	// gateway drops its cached entry when it expires, within its
	// key_cache.ttl (30s by default).
	InvalidationCacheTTL = "cache_ttl"
	// InvalidationPublishFailed: the backend has a Redis but the publish
	// failed (its log says why: "invalidation not published"). A gateway
	// whose subscription broke too drops its cached keys when it subscribes
	// again, and within its key_cache.ttl at the latest; one whose
	// subscription held keeps its entry until it expires, up to its
	// key_cache.pushed_ttl (15m by default). Repeating the action publishes
	// it again.
	InvalidationPublishFailed = "publish_failed"
)

// Announcement is what the answer of every admin action that announces a
// change to the gateways (key revoke, vendor approve, suspend, reinstate,
// services) says of that announcement.
type Announcement struct {
	// Published is true when the change was published through Redis, so
	// that every gateway subscribed to it drops its cached entry at once;
	// false when it was not (no Redis configured, or the publish failed).
	Published bool `json:"published"`
	// Invalidation says how soon the gateways learn of it: one of the
	// Invalidation constants.
	Invalidation string `json:"invalidation"`
}

func (a *API) announcement(published bool) Announcement {
	switch {
	case !a.o.Invalidates:
		return Announcement{Invalidation: InvalidationCacheTTL}
	case published:
		return Announcement{Published: true, Invalidation: InvalidationRedis}
	}
	return Announcement{Invalidation: InvalidationPublishFailed}
}

// RevokedKey is the answer to a revocation: the key, and how soon the
// gateways refuse it.
type RevokedKey struct {
	Key
	Announcement
}

// VendorChange is the answer to a vendor action (approve, suspend,
// reinstate, services): the vendor, and how soon the gateways apply it.
type VendorChange struct {
	Vendor
	Announcement
}
