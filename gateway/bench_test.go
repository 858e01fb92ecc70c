package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"vendorgate/config"
	"vendorgate/shared/testredis"
	"vendorgate/shared/wire"
)

// benchHandler drives the whole handler (routing, auth from the cache,
// limiter, proxy to a real backend over loopback, answer) without a client
// socket, so that allocations are the gateway's own.
func benchHandler(b *testing.B, mod func(*Options), headers ...string) {
	rig := newHandlerRig(b, mod)
	rig.headers = headers
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var req fasthttp.Request
		var ctx fasthttp.RequestCtx
		for pb.Next() {
			if err := rig.read(&req, &ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// handlerRig is a gateway's handler with no listener in front of it, a test
// backend behind it, a read limit that never refuses and an approved key.
type handlerRig struct {
	h       fasthttp.RequestHandler
	key     string
	peer    *net.TCPAddr
	backend string   // the test backend's host:port
	headers []string // name, value, ...: sent on each request
}

func newHandlerRig(tb testing.TB, mod func(*Options)) *handlerRig {
	be := newTestBackend(tb)
	gw := startGateway(tb, be, func(o *Options) {
		o.Config.Limits.Vendor.Reads = config.Limit{Rate: 1 << 30, Period: time.Second}
		if mod != nil {
			mod(o)
		}
	})
	key, _ := be.addKey("vendor-bench", wire.VendorApproved, time.Now().Add(time.Hour))
	return &handlerRig{h: gw.g.Handler(), key: key, peer: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}, backend: be.addr}
}

// read sends one proxied read through the handler, reusing req and ctx as
// the server does, and checks that the backend's 200 came back.
func (r *handlerRig) read(req *fasthttp.Request, ctx *fasthttp.RequestCtx) error {
	return r.readPath(req, ctx, "/api/vendor/v1/orders/fast")
}

// readPath is read of path (a path ending in /fast: the test backend
// answers it without allocating).
func (r *handlerRig) readPath(req *fasthttp.Request, ctx *fasthttp.RequestCtx, path string) error {
	req.Reset()
	req.Header.SetMethod("GET")
	req.SetRequestURI(path)
	req.Header.Set(wire.HeaderAPIKey, r.key)
	for i := 0; i+1 < len(r.headers); i += 2 {
		req.Header.Set(r.headers[i], r.headers[i+1])
	}
	ctx.Init(req, r.peer, nil)
	r.h(ctx)
	if ctx.Response.StatusCode() != 200 {
		return fmt.Errorf("status %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	_ = ctx.Response.Body() // drains the stream as the server does when writing it
	ctx.Response.Reset()
	return nil
}

func BenchmarkHandlerLocal(b *testing.B) {
	benchHandler(b, func(o *Options) { o.DisableAccessLog = true })
}

func BenchmarkHandlerLocalAccessLog(b *testing.B) {
	benchHandler(b, func(o *Options) { o.Logger = slog.New(slog.NewJSONHandler(io.Discard, nil)) })
}

// BenchmarkHandlerLocalAccessLogHeaders is BenchmarkHandlerLocalAccessLog
// with the headers a client sends that are echoed or logged, clean: a
// browser's User-Agent and a request id of its own (each scanned for
// anything shaped like an API key; the User-Agent bounded and escaped).
func BenchmarkHandlerLocalAccessLogHeaders(b *testing.B) {
	benchHandler(b, func(o *Options) { o.Logger = slog.New(slog.NewJSONHandler(io.Discard, nil)) },
		"User-Agent", "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0",
		wire.HeaderRequestID, "3f2504e0-4f89-11d3-9a0c-0305e82c3301")
}

// BenchmarkHandlerLocalWarnLevel is the shipped configuration: the access
// log on, the logger at warn (log_level: warn), so no line is written.
func BenchmarkHandlerLocalWarnLevel(b *testing.B) {
	benchHandler(b, func(o *Options) {
		o.Logger = slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
}

func BenchmarkHandlerRedis(b *testing.B) {
	rs := testredis.Start(b)
	benchHandler(b, func(o *Options) {
		o.DisableAccessLog = true
		o.Config.Redis.URL = config.List{rs.URL()}
	})
}

// BenchmarkHandlerLocalTraced1pct is BenchmarkHandlerLocal with tracing on
// at 1 % sampling (parent-based: a request without traceparent is a root),
// spans batched to an exporter that drops them: the cost of tracing per
// request, next to BenchmarkHandlerLocal.
func BenchmarkHandlerLocalTraced1pct(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.01))),
		sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	benchHandler(b, func(o *Options) {
		o.DisableAccessLog = true
		o.Tracer = tp.Tracer("bench")
	})
}
