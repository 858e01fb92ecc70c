package proxy

import (
	"bytes"

	"github.com/valyala/fasthttp"

	"vendorgate/shared/wire"
)

// hopHeaders are removed both ways (RFC 9110 7.6.1 and the de-facto list
// net/http/httputil keeps).
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// connectionIndex is Connection's index in hopHeaders.
const connectionIndex = 0

// hopIndex is the index in hopHeaders of name (any case), or -1.
func hopIndex(name []byte) int { return indexFold(hopHeaders, name) }

// header is what removeHopHeaders needs of a request or response header:
// *fasthttp.RequestHeader or *fasthttp.ResponseHeader.
type header interface {
	PeekAll(key string) [][]byte
	Del(key string)
	DelBytes(key []byte)
	ResetConnectionClose()
}

// removeHopHeaders removes from h the headers named in Connection (but the
// connection options close and keep-alive) and the hopHeaders present,
// applied to the request and the response alike. On a response, framing
// keeps Transfer-Encoding and Connection, which fasthttp manages itself for
// the client side. The same walk over the header names, which finds the
// hop-by-hop ones present (usually none) so that only those cost a Del,
// reports which of also are present: bit i for also[i].
func removeHopHeaders(h header, framing bool, also []string) (present uint16) {
	var hop uint16
	lengths := hopLengths | lengthsOf(also)
	note := func(name []byte) {
		if !lengths.has(len(name)) {
			return // no listed name is this long: most names, no comparison
		}
		if i := hopIndex(name); i >= 0 {
			hop |= 1 << i
		} else if i := indexFold(also, name); i >= 0 {
			present |= 1 << i
		}
	}
	// The walk takes the concrete type: All through an interface would
	// allocate its iterator on every request.
	switch h := h.(type) {
	case *fasthttp.RequestHeader:
		for name := range h.All() {
			note(name)
		}
	case *fasthttp.ResponseHeader:
		for name := range h.All() {
			note(name)
		}
	}
	// The names a Connection header lists go too; the walk said whether
	// there is one (most requests and answers have none). Every Connection
	// line counts (RFC 9110 5.3: lines of one name are one list); Peek
	// would give the first only.
	if hop&(1<<connectionIndex) != 0 {
		for _, c := range h.PeekAll(fasthttp.HeaderConnection) {
			for _, name := range bytes.Split(c, []byte{','}) {
				if name = bytes.TrimSpace(name); len(name) > 0 && !bytes.EqualFold(name, []byte("close")) && !bytes.EqualFold(name, []byte("keep-alive")) {
					h.DelBytes(name)
				}
			}
		}
	}
	// All yields Trailer too, which fasthttp keeps apart from the other
	// headers: a name not walked is not there.
	for i, name := range hopHeaders {
		if hop&(1<<i) == 0 {
			continue
		}
		if framing && (name == fasthttp.HeaderTransferEncoding || name == fasthttp.HeaderConnection) {
			continue
		}
		h.Del(name)
	}
	h.ResetConnectionClose()
	return present
}

// nameLengths is a set of name lengths below 64.
type nameLengths uint64

func (l nameLengths) has(n int) bool { return n < 64 && l&(1<<n) != 0 }

// hopLengths holds the length of every hopHeaders name.
var hopLengths = lengthsOf(hopHeaders)

// lengthsOf is the set of the lengths of names (each under 64 bytes).
func lengthsOf(names []string) nameLengths {
	var l nameLengths
	for _, n := range names {
		if len(n) < 64 {
			l |= 1 << len(n)
		}
	}
	return l
}

// indexFold is the index in names of name (any case), or -1.
func indexFold(names []string, name []byte) int {
	for i, n := range names {
		if len(name) == len(n) && bytes.EqualFold(name, []byte(n)) {
			return i
		}
	}
	return -1
}

// gatewayHeaders are the request headers only the gateway writes (and the
// API key, which never goes further): every copy a client sent is removed.
var gatewayHeaders = []string{wire.HeaderInternalToken, wire.HeaderVendorID, wire.HeaderKeyID, wire.HeaderEnvironment,
	wire.HeaderRequestID, wire.HeaderForwardedFor, wire.HeaderAPIKey}

// requestNames are the names prepareRequest's walk looks for: the
// gatewayHeaders (bits below len(gatewayHeaders)), then W3C trace context.
var requestNames = append(append([]string(nil), gatewayHeaders...), "Traceparent", "Tracestate")

// traceContextBits are the bits of traceparent and tracestate in what
// removeHopHeaders reports of requestNames.
var traceContextBits = uint16(3) << len(gatewayHeaders)

// delEvery deletes every copy of name in any spelling. Del removes every
// copy of the normalised name, which is all of them while the server
// normalises names; without that, each other spelling is deleted as it
// was sent.
func delEvery(h *fasthttp.RequestHeader, name string) {
	h.Del(name)
	for range 64 { // a header holds far fewer names; bounds a Del that would not take
		var buf [64]byte
		var found []byte
		for k := range h.All() {
			if len(k) == len(name) && bytes.EqualFold(k, []byte(name)) {
				found = append(buf[:0], k...)
				break
			}
		}
		if found == nil {
			return
		}
		h.DelBytes(found)
	}
}

// prepareRequest strips hop-by-hop headers (and those named in Connection),
// removes every header only the gateway may set, the API key itself (the
// backend trusts the identity headers instead), an untrusted caller's
// sampling decision and tracestate (Identity.KeepTraceContext), and sets
// the identity. One walk over the names finds what is present.
// A Del per listed name would cost a key normalization and a scan each, on
// every request: only the names found present are deleted.
func prepareRequest(h *fasthttp.RequestHeader, id *Identity, token []byte) {
	forged := removeHopHeaders(h, false, requestNames)
	if forged&traceContextBits != 0 && !id.KeepTraceContext {
		untrustedTraceContext(h)
	}
	// Set replaces only the first copy of a name: a client's second
	// X-Vendor-Id would reach the backend after ours. Delete every copy.
	for i, name := range gatewayHeaders {
		if forged&(1<<i) != 0 {
			delEvery(h, name)
		}
	}
	// The names are written as the server's normalization spells them
	// (canonical.go): Set would copy and normalize each on every request.
	h.SetCanonical(canonInternalToken, token)
	h.SetCanonical(canonVendorID, bytesOf(id.VendorID))
	h.SetCanonical(canonKeyID, bytesOf(id.KeyID))
	h.SetCanonical(canonEnvironment, bytesOf(id.Environment))
	h.SetCanonical(canonRequestID, id.RequestID)
	h.SetCanonical(canonForwardedFor, id.ClientIP)
}

// internalResponseHeaders never reach a client.
var internalResponseHeaders = []string{wire.HeaderInternalToken, wire.HeaderVendorID, wire.HeaderKeyID, wire.HeaderEnvironment}

// stripResponse removes hop-by-hop headers (but the framing ones fasthttp
// manages for the client side) and internal headers from a backend answer,
// deleting only the names found present.
func stripResponse(h *fasthttp.ResponseHeader) {
	internal := removeHopHeaders(h, true, internalResponseHeaders)
	for i, name := range internalResponseHeaders {
		if internal&(1<<i) != 0 {
			h.Del(name)
		}
	}
}
