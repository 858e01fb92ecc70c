package gateway

import (
	"io"
	"log/slog"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// bareProxy is the least a fasthttp proxy does: one HostClient, the
// request passed through as it came, the answer passed back. It is the
// yardstick of BenchmarkProxiedVsBare.
func bareProxy(backend string) fasthttp.RequestHandler {
	hc := &fasthttp.HostClient{Addr: backend, MaxConns: 512, MaxIdemponentCallAttempts: 1, NoDefaultUserAgentHeader: true}
	return func(ctx *fasthttp.RequestCtx) {
		ctx.Request.SetHost(backend)
		if err := hc.Do(&ctx.Request, &ctx.Response); err != nil {
			ctx.Error(err.Error(), fasthttp.StatusBadGateway)
		}
	}
}

// processCPU is this process' user and system time so far.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkProxiedVsBare runs the gateway's proxied read (in-process
// limiter, access log at the shipped warn level) and a bare fasthttp
// proxy in the same process, against the same in-process responder, in
// alternating rounds, and reports the CPU of each per request and their
// ratio (gateway-cpu-ratio): the cost the gateway adds over a proxy that
// does nothing, measured in one run so that the machine's noise falls on
// both. The process' CPU includes the responder's, the same in both, so
// the ratio understates the gateway's own share; it moves when the
// request path's cost moves, which is what it is for.
func BenchmarkProxiedVsBare(b *testing.B) {
	rig := newHandlerRig(b, func(o *Options) {
		o.Logger = slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	bare := &handlerRig{h: bareProxy(rig.backend), key: rig.key, peer: rig.peer}
	workers := 4 * runtime.GOMAXPROCS(0)
	// drive sends n requests through r from workers goroutines and
	// returns the process CPU it took.
	drive := func(r *handlerRig, n int) time.Duration {
		var wg sync.WaitGroup
		per := (n + workers - 1) / workers
		start := processCPU(b)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var req fasthttp.Request
				var ctx fasthttp.RequestCtx
				for i := 0; i < per; i++ {
					if err := r.read(&req, &ctx); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		return processCPU(b) - start
	}
	drive(rig, 2000) // warm both: connections, pools, the key cache
	drive(bare, 2000)
	const rounds = 10
	per := max(b.N/rounds, workers)
	var gw, br time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < rounds; i++ {
		gw += drive(rig, per)
		br += drive(bare, per)
	}
	b.StopTimer()
	n := float64(rounds * ((per + workers - 1) / workers) * workers)
	b.ReportMetric(float64(gw.Nanoseconds())/n/1e3, "gateway-cpu-µs/req")
	b.ReportMetric(float64(br.Nanoseconds())/n/1e3, "bare-cpu-µs/req")
	b.ReportMetric(float64(gw)/float64(br), "gateway-cpu-ratio")
}
