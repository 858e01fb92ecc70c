// Package backend owns vendors, API keys and orders. It serves the vendor
// API and the internal key lookup to the gateway on one listener and the
// operator API with /metrics, /healthz and /readyz on another, and runs the
// sandbox provider and the deadline sweeper in the background.
package backend

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"vendorgate/backend/admin"
	"vendorgate/backend/audit"
	"vendorgate/backend/billing"
	"vendorgate/backend/internalapi"
	"vendorgate/backend/invalidate"
	"vendorgate/backend/metrics"
	"vendorgate/backend/periodic"
	"vendorgate/backend/respond"
	"vendorgate/backend/store"
	"vendorgate/backend/store/storetrace"
	"vendorgate/backend/vendorapi"
	"vendorgate/backend/vendors"
	"vendorgate/config"
	"vendorgate/shared/apikey"
	"vendorgate/shared/barelf"
	"vendorgate/shared/hoptls"
	"vendorgate/shared/idleconn"
	"vendorgate/shared/logctx"
	"vendorgate/shared/logtext"
	"vendorgate/shared/serverlog"
	"vendorgate/shared/tracing"
	"vendorgate/shared/wire"
)

// Options configure a Backend: its configuration as loaded, and what
// tests inject.
type Options struct {
	// Config is the backend's configuration (config.LoadBackend); New
	// validates it. Each setting's default is config.DefaultBackend's.
	Config *config.Backend
	// Store, when not nil, is used instead of opening Config.Database (a
	// test's store); the Backend closes it at Shutdown.
	Store  store.Store
	Logger *slog.Logger
	// Tracer makes a server span per request, with a span per store call
	// under it (backend/store/storetrace); nil is tracing off.
	Tracer trace.Tracer
	// Now is the clock of the domain, the simulator and the sweeper.
	// Default time.Now.
	Now func() time.Time
}

// Backend is the whole backend service.
type Backend struct {
	o         Options
	cfg       *config.Backend
	log       *slog.Logger
	store     store.Store
	publisher *invalidate.Publisher
	metrics   *metrics.Metrics
	vendors   *vendors.Service
	bg        *background

	server, adminServer *fasthttp.Server
	tls                 *tls.Config // listen's TLS; nil: plain TCP
	ln, adminLn         net.Listener
	errs                chan error
	serving             sync.WaitGroup
}

// New opens the store (applying migrations), seeds the sandbox vendor when
// asked, and builds both listeners' handlers. It does not listen yet.
func New(ctx context.Context, o Options) (*Backend, error) {
	if o.Config == nil {
		return nil, errors.New("backend: no configuration")
	}
	if err := o.Config.Validate(); err != nil {
		return nil, fmt.Errorf("backend configuration: %w", err)
	}
	tc, err := TLSConfig(o.Config)
	if err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	// A line logged under a request's context names its request id; text
	// a caller sent is logged with the characters a terminal or a log
	// viewer acts on escaped.
	o.Logger = slog.New(logctx.NewHandler(logtext.NewHandler(o.Logger.Handler())))
	if o.Now == nil {
		o.Now = time.Now
	}
	st := o.Store
	if st == nil {
		if st, err = openStore(ctx, o.Config); err != nil {
			return nil, err
		}
	}
	if o.Tracer != nil {
		system := "sqlite"
		if o.Config.IsPostgres() {
			system = "postgresql"
		}
		st = storetrace.New(st, o.Tracer, system)
	}
	b := &Backend{o: o, cfg: o.Config, log: o.Logger, store: st, tls: tc, errs: make(chan error, 2)}
	if err := b.build(ctx); err != nil {
		b.closeAll()
		return nil, err
	}
	return b, nil
}

// publishTimeout bounds one invalidation PUBLISH to Redis: a change must
// not hang an operator's command behind a sick Redis. A constant of the
// backend, not a setting: no configuration ever reached it.
const publishTimeout = 2 * time.Second

func (b *Backend) build(ctx context.Context) error {
	c := b.cfg
	var pub vendors.Publisher
	if len(c.RedisURL) > 0 {
		p, err := invalidate.New(invalidate.Options{URLs: c.RedisURL, MasterName: c.RedisMasterName, Timeout: publishTimeout})
		if err != nil {
			return err
		}
		b.publisher, pub = p, p
	}
	b.metrics = metrics.New(b.store.CountOrdersByStatus, b.log)
	signer, err := apikey.NewSigner(c.KeySigningSecrets)
	if err != nil {
		return fmt.Errorf("backend: key signing secrets: %w", err)
	}
	vs, err := vendors.New(vendors.Options{Store: b.store, Prefixes: c.KeyPrefixes.APIKey(), Signer: signer, KeyLifetime: c.KeyLifetime,
		Publisher: pub, Now: b.o.Now, Logger: b.log})
	if err != nil {
		return err
	}
	b.vendors = vs
	b.metrics.WatchKeyExpiry(vs.CountVendorsExpiring, b.log)
	if c.SeedSandboxVendor {
		if _, err := vs.Seed(ctx); err != nil {
			return fmt.Errorf("seed sandbox vendor: %w", err)
		}
	}
	orders, bg, err := b.buildOrders()
	if err != nil {
		return err
	}
	al, err := audit.New(b.store, b.o.Now, c.AuditRetention)
	if err != nil {
		return err
	}
	bg.revoker = periodic.New(c.SweepInterval, func(ctx context.Context) (int, error) {
		return vs.RevokeDue(ctx, func(ctx context.Context, k *store.Key) {
			if err := al.Record(ctx, store.AuditRecord{Actor: audit.System, Action: audit.KeyRevokedScheduled, VendorID: k.VendorID, KeyID: k.ID}); err != nil {
				b.log.Error("audit record not written", "error", err, "action", audit.KeyRevokedScheduled, "vendor_id", k.VendorID, "key_id", k.ID)
			}
		})
	}, b.log, "scheduled key revocations")
	bg.auditSweep = periodic.New(auditSweepInterval, al.Sweep, b.log, "audit retention sweep")
	if x := c.BillingExport; x.URL != "" {
		// Lookback: no service changes after the order deadline, which the
		// sweeper applies within its interval; an hour's margin.
		ex, err := billing.NewExporter(billing.ExporterOptions{Store: b.store, URL: x.URL, Token: x.Token, Source: x.Source, Type: x.Type,
			BatchSize: x.BatchSize, Lookback: c.OrderDeadline + time.Hour, BackoffMin: x.BackoffMin, BackoffMax: x.BackoffMax,
			Client: &http.Client{Timeout: x.Timeout}, Now: b.o.Now})
		if err != nil {
			return err
		}
		bg.exporter = periodic.New(x.Interval, ex.Run, b.log, "billing export")
		b.metrics.WatchBillingOutbox(b.store.CountBillingOutbox, b.log)
	}
	b.bg = bg

	tokens, err := c.NamedAdminTokens()
	if err != nil {
		return err
	}
	adminTokens := make([]admin.Token, 0, len(tokens))
	for _, t := range tokens {
		adminTokens = append(adminTokens, admin.Token{Name: t.Name, Token: t.Token})
	}
	internal := internalapi.New(c.InternalToken, vs, b.log)
	bill, err := billing.New(b.store, b.o.Now)
	if err != nil {
		return err
	}
	adminAPI, err := admin.New(admin.Options{Tokens: adminTokens, Audit: al, Vendors: vs, Orders: orders, DB: b.store, Invalidates: b.publisher != nil,
		Billing: bill, Now: b.o.Now, Metrics: b.metrics.Handler(), Logger: b.log})
	if err != nil {
		return err
	}
	r := respond.NewRouter(b.log)
	r.GET("/internal/v1/keys/{hash}", internal.Guard(internal.LookupKey)) // guarded here too, whatever the path looked like
	r.GET(wire.ReadyPath, internal.Guard(adminAPI.Readyz))                // the gateways' readiness probe
	r.POST(wire.UsageFlushPath, internal.Guard(bill.FlushHandler(b.log))) // the gateways' usage flushes
	vapi, err := vendorapi.New(vendorapi.Options{Vendors: vs, Orders: orders, Audit: al, MaxBodyBytes: c.MaxBodyBytes, Logger: b.log})
	if err != nil {
		return err
	}
	vapi.Register(r, internal.Guard)
	b.server = newServer(b.metrics.Instrument(traceRequests(b.o.Tracer, internal.FromGateway, logRequests(b.log, guardPrefixes(internal, r.Handler)))), c.MaxBodyBytes, b.log)

	ar := respond.NewRouter(b.log)
	adminAPI.Register(ar)
	// The admin listener takes report PDFs in base64: allow more than a
	// vendor body, but only once the headers carry the admin token.
	b.adminServer = newServer(b.metrics.Instrument(ar.Handler), 64<<20, b.log)
	b.adminServer.HeaderReceived = adminAPI.HeaderReceived
	b.adminServer.ErrorHandler = adminAPI.ServerError
	return nil
}

// guardPrefixes puts the internal-token guard in front of every path under
// /api/vendor/ and /internal/, unknown ones included, so that nothing there
// answers (not even a 404) without the token. The router matches the raw
// path and fasthttp's Path is the normalised one (%2F decoded, dot segments
// resolved): /internal/v1/keys/..%2f..%2fx is a key lookup to the router
// and /x to Path. So both are checked, in any letter case.
func guardPrefixes(internal *internalapi.API, h fasthttp.RequestHandler) fasthttp.RequestHandler {
	guarded := internal.Guard(h)
	return func(ctx *fasthttp.RequestCtx) {
		if guardedPath(ctx.Request.URI().PathOriginal()) || guardedPath(ctx.Path()) {
			guarded(ctx)
			return
		}
		h(ctx)
	}
}

func guardedPath(p []byte) bool {
	return hasPrefixFold(p, "/api/vendor/") || hasPrefixFold(p, "/internal/")
}

func hasPrefixFold(p []byte, prefix string) bool {
	return len(p) >= len(prefix) && bytes.EqualFold(p[:len(prefix)], []byte(prefix))
}

// logRequests logs every answer with the gateway's request id: at debug
// level (the gateway logs each request already), at warn for a 5xx. It logs
// the route pattern, not the path, which may hold a key hash.
func logRequests(log *slog.Logger, h fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		start := time.Now()
		h(ctx)
		level := slog.LevelDebug
		if ctx.Response.StatusCode() >= 500 {
			level = slog.LevelWarn
		}
		if !log.Enabled(context.Background(), level) {
			return
		}
		log.Log(context.Background(), level, "request",
			"request_id", respond.RequestID(ctx),
			"method", string(ctx.Method()), "route", ctx.UserValue(router.MatchedRoutePathParam), "status", ctx.Response.StatusCode(),
			"duration", time.Since(start), "vendor_id", logtext.Header(ctx.Request.Header.Peek(wire.HeaderVendorID)))
	}
}

// traceRequests makes a server span of each request, continuing the
// gateway's trace (W3C traceparent) or starting one, and keeps its context
// on the request for the store calls below (request.ContextOf). Only the
// gateway's sampling decision and tracestate are followed (fromGateway:
// the internal token); any other caller's trace id is continued, sampled
// by the backend's own ratio (tracing.Extract). The gateways' readiness
// probe (wire.ReadyPath, once a second from each) and usage flushes
// (wire.UsageFlushPath, every usage.flush_interval from each) are not
// traced: each would be a trace of its own every few seconds, most of
// what was exported, and neither belongs to a vendor's request.
func traceRequests(tracer trace.Tracer, fromGateway func(*fasthttp.RequestCtx) bool, h fasthttp.RequestHandler) fasthttp.RequestHandler {
	if tracer == nil {
		return h
	}
	return func(ctx *fasthttp.RequestCtx) {
		if p := string(ctx.Path()); p == wire.ReadyPath || p == wire.UsageFlushPath {
			h(ctx)
			return
		}
		parent := tracing.Extract(&ctx.Request.Header, fromGateway(ctx))
		c, span := tracer.Start(parent, string(ctx.Method()), trace.WithSpanKind(trace.SpanKindServer))
		tracing.Attach(ctx, c)
		h(ctx)
		status := ctx.Response.StatusCode()
		if route, ok := ctx.UserValue(router.MatchedRoutePathParam).(string); ok {
			span.SetName(string(ctx.Method()) + " " + route)
			span.SetAttributes(attribute.String("http.route", route))
		}
		span.SetAttributes(attribute.String("http.request.method", string(ctx.Method())),
			attribute.Int("http.response.status_code", status),
			attribute.String("vendorgate.request_id", string(ctx.Request.Header.Peek(wire.HeaderRequestID))))
		if status >= 500 {
			span.SetStatus(codes.Error, fasthttp.StatusMessage(status))
		}
		span.End()
	}
}

func newServer(h fasthttp.RequestHandler, maxBody int, log *slog.Logger) *fasthttp.Server {
	return &fasthttp.Server{
		Handler:               h,
		ErrorHandler:          respond.ServerErrorHandler,
		MaxRequestBodySize:    maxBody,
		ReadBufferSize:        wire.BackendReadBuffer, // what the gateway accepts, with its identity headers
		ReadTimeout:           30 * time.Second,
		WriteTimeout:          60 * time.Second,
		IdleTimeout:           60 * time.Second,
		NoDefaultServerHeader: true,
		Logger:                serverlog.Printer{Log: log}, // never the request's bytes
	}
}

// Start binds both listeners, serves them and starts the sandbox provider
// and the sweeper. A serving failure is reported on Errors.
func (b *Backend) Start() error {
	ln, err := net.Listen("tcp", b.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", b.cfg.Listen, err)
	}
	aln, err := net.Listen("tcp", b.cfg.AdminListen)
	if err != nil {
		ln.Close()
		return fmt.Errorf("admin listen %s: %w", b.cfg.AdminListen, err)
	}
	b.ln, b.adminLn = ln, aln
	// Reports stream from the vendor listener: bounded by progress there.
	// A bare-LF head is refused at once (barelf), not at the read timeout.
	// Under TLS, progress is counted on the raw bytes (a handshake that
	// stalls is cut alike) and the bare-LF guard reads the plaintext.
	if b.tls != nil {
		ln = barelf.NewListener(tls.NewListener(idleconn.NewListener(ln, idleconn.Options{Idle: b.cfg.StreamIdleTimeout}), b.tls))
	} else {
		ln = idleconn.NewListener(barelf.NewListener(ln), idleconn.Options{Idle: b.cfg.StreamIdleTimeout})
	}
	for _, s := range []struct {
		srv *fasthttp.Server
		ln  net.Listener
	}{{b.server, ln}, {b.adminServer, aln}} {
		b.serving.Add(1)
		go func() {
			defer b.serving.Done()
			if err := s.srv.Serve(s.ln); err != nil {
				b.errs <- err
			}
		}()
	}
	b.bg.start()
	b.log.Info("backend listening", "listen", ln.Addr().String(), "admin_listen", aln.Addr().String(),
		"tls", b.tls != nil, "client_certificates", b.tls != nil && b.tls.ClientCAs != nil,
		"database", config.RedactURL(b.cfg.Database), "redis_invalidation", b.publisher != nil)
	return nil
}

// TLSConfig reads the files of c's TLS listener (c.TLS): nil when it is
// off. A file that cannot be read, holds no certificate, or a key that
// does not match its certificate is an error naming the file: the start
// and -check refuse it.
func TLSConfig(c *config.Backend) (*tls.Config, error) {
	tc, err := hoptls.ServerConfig(hoptls.ServerFiles{CertFile: c.TLS.CertFile, KeyFile: c.TLS.KeyFile, ClientCAFile: c.TLS.ClientCAFile})
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	return tc, nil
}

// Addr is the address of the vendor and internal listener.
func (b *Backend) Addr() string { return b.ln.Addr().String() }

// AdminAddr is the address of the admin listener.
func (b *Backend) AdminAddr() string { return b.adminLn.Addr().String() }

// Errors reports a listener that stopped serving on its own.
func (b *Backend) Errors() <-chan error { return b.errs }

// Shutdown stops accepting, drains in-flight requests until ctx ends, stops
// the background work and closes the database.
func (b *Backend) Shutdown(ctx context.Context) error {
	var errs []error
	for _, s := range []*fasthttp.Server{b.server, b.adminServer} {
		if s != nil && b.ln != nil {
			if err := s.ShutdownWithContext(ctx); err != nil {
				errs = append(errs, err)
			}
		}
	}
	// Shutdown only closes listeners that Serve has registered; a Shutdown
	// right after Start can come first, so close them here as well.
	for _, ln := range []net.Listener{b.ln, b.adminLn} {
		if ln != nil {
			_ = ln.Close()
		}
	}
	b.serving.Wait()
	errs = append(errs, b.closeAll())
	return errors.Join(errs...)
}

func (b *Backend) closeAll() error {
	var errs []error
	if b.bg != nil {
		b.bg.stop()
	}
	if b.publisher != nil {
		errs = append(errs, b.publisher.Close())
	}
	if b.store != nil {
		errs = append(errs, b.store.Close())
	}
	return errors.Join(errs...)
}
