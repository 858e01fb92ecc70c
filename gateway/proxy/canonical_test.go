package proxy

import (
	"testing"

	"github.com/valyala/fasthttp"
)

// TestCanonicalNames: each name set with SetCanonical is spelled as the
// server's normalization spells it, so that the backend sees the same
// bytes Set would have sent.
func TestCanonicalNames(t *testing.T) {
	for _, name := range [][]byte{canonInternalToken, canonVendorID, canonKeyID, canonEnvironment, canonRequestID, canonForwardedFor} {
		var h fasthttp.RequestHeader
		h.Set(string(name), "v")
		var got string
		for k := range h.All() {
			got = string(k)
		}
		if got != string(name) {
			t.Errorf("%q is normalized to %q", name, got)
		}
	}
}

// TestConnectionIndex: removeHopHeaders reads the Connection bit of its
// walk at connectionIndex.
func TestConnectionIndex(t *testing.T) {
	if hopHeaders[connectionIndex] != fasthttp.HeaderConnection {
		t.Fatalf("hopHeaders[%d] is %q", connectionIndex, hopHeaders[connectionIndex])
	}
}
