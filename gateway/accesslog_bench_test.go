package gateway

import (
	"io"
	"log/slog"
	"testing"

	"github.com/valyala/fasthttp"

	"vendorgate/shared/wire"
)

// BenchmarkAccessLogSerial is BenchmarkProxiedSerial's gateway request
// with the access log written (JSON, discarded) and the headers a client
// sends that are logged or echoed, clean: a browser's User-Agent and a
// request id of its own. One at a time, for callgrind (docs/bench.md).
func BenchmarkAccessLogSerial(b *testing.B) {
	rig := newHandlerRig(b, func(o *Options) { o.Logger = slog.New(slog.NewJSONHandler(io.Discard, nil)) })
	rig.headers = []string{"User-Agent", "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0",
		wire.HeaderRequestID, "3f2504e0-4f89-11d3-9a0c-0305e82c3301"}
	var req fasthttp.Request
	var ctx fasthttp.RequestCtx
	b.ReportAllocs()
	for b.Loop() {
		if err := rig.read(&req, &ctx); err != nil {
			b.Fatal(err)
		}
	}
}
