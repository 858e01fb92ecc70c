package spans

import (
	"testing"

	"github.com/valyala/fasthttp"
)

// TestTraceIDWithTracingOff: with tracing off the access log's trace id is
// the caller's traceparent's, and only a well-formed one's.
func TestTraceIDWithTracingOff(t *testing.T) {
	for tp, want := range map[string]string{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01": "4bf92f3577b34da6a3ce929d0e0e4736",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01": "",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01": "",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7":    "",
		"": "",
	} {
		var ctx fasthttp.RequestCtx
		if tp != "" {
			ctx.Request.Header.Set("traceparent", tp)
		}
		var r Request
		if got := r.TraceID(&ctx); got != want {
			t.Errorf("traceparent %q: trace id %q, want %q", tp, got, want)
		}
		if r.Active() || r.Finish(&ctx, 200, nil, "", "") != "" {
			t.Errorf("the zero Request is not tracing off")
		}
	}
}
