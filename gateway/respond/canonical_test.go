package respond

import (
	"testing"

	"github.com/valyala/fasthttp"
)

// TestCanonicalNames: each name set with SetCanonical is spelled as the
// server's normalization spells it, so that clients see the same bytes Set
// would have sent.
func TestCanonicalNames(t *testing.T) {
	for _, name := range [][]byte{canonCacheControl, canonRequestID, canonRetryAfter, canonPolicy, canonRateLimit, canonKeyExpiration} {
		var h fasthttp.ResponseHeader
		h.Set(string(name), "v")
		var got string
		for k := range h.All() {
			if string(k) != fasthttp.HeaderContentType && string(k) != fasthttp.HeaderServer {
				got = string(k)
			}
		}
		if got != string(name) {
			t.Errorf("%q is normalized to %q", name, got)
		}
	}
}
