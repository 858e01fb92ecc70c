package proxy

import "github.com/valyala/fasthttp"

// untrustedTraceContext leaves of an untrusted caller's W3C trace context
// only its ids: the sampled flag of traceparent is cleared and tracestate
// removed, so that the backend, which follows the trace context it is
// sent, does not take the caller's decision for the gateway's. A
// traceparent that is not well formed is removed (the backend would
// ignore it). It does not allocate.
func untrustedTraceContext(h *fasthttp.RequestHeader) {
	h.Del("Tracestate")
	tp := h.Peek("Traceparent")
	if len(tp) == 0 {
		return
	}
	const size = 55 // version-traceid-parentid-flags
	if len(tp) != size || tp[2] != '-' || tp[35] != '-' || tp[52] != '-' || !isHex(tp[:2]) || !isHex(tp[53:]) {
		h.Del("Traceparent")
		return
	}
	var b [size]byte
	copy(b[:], tp)
	const sampled = 0x01 // W3C trace-flags' sampled bit
	flags := unhex(b[53])<<4 | unhex(b[54])
	flags &^= sampled
	const digits = "0123456789abcdef"
	b[53], b[54] = digits[flags>>4], digits[flags&0xf]
	h.SetBytesV("Traceparent", b[:])
}

func isHex(b []byte) bool {
	for _, c := range b {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func unhex(c byte) byte {
	if c >= 'a' {
		return c - 'a' + 10
	}
	return c - '0'
}
