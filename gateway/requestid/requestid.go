// Package requestid gives each answer its request id (X-Request-Id): the
// client's, when it is sane and holds nothing shaped like an API key,
// else one the gateway makes from a prefix random per process and a
// sequence number. One file: requestid.go. Only package gateway imports
// it.
package requestid

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync/atomic"

	"github.com/valyala/fasthttp"

	"vendorgate/shared/apikey"
	"vendorgate/shared/wire"
)

// Source makes a gateway's request ids: its prefix (8 hex characters and
// '-', Seed) and a sequence number in hex. The gateway keeps it in place,
// so that a request's id is no pointer further away.
type Source struct {
	prefix [9]byte
	seq    atomic.Uint64
}

// Seed gives s its random prefix, before the first id.
func (s *Source) Seed() {
	var seed [4]byte
	_, _ = rand.Read(seed[:])
	hex.Encode(s.prefix[:8], seed[:])
	s.prefix[8] = '-'
}

// Set puts the id of the request with headers h into rid and returns its
// length: the client's X-Request-Id when it is Sane, else a new one.
func (s *Source) Set(rid *[64]byte, h *fasthttp.RequestHeader) int {
	if v := h.Peek(wire.HeaderRequestID); Sane(v) {
		return copy(rid[:], v)
	}
	n := copy(rid[:], s.prefix[:])
	b := strconv.AppendUint(rid[n:n], s.seq.Add(1), 16)
	return n + len(b)
}

// Of is Set's id in a slice of its own, for an answer outside the request
// flow (the plain listener's).
func (s *Source) Of(ctx *fasthttp.RequestCtx) []byte {
	var rid [64]byte
	n := s.Set(&rid, &ctx.Request.Header)
	return append([]byte(nil), rid[:n]...)
}

// Append appends a new id to dst, for an answer written before any
// request was read (a connection refused).
func (s *Source) Append(dst []byte) []byte {
	dst = append(dst, s.prefix[:]...)
	return strconv.AppendUint(dst, s.seq.Add(1), 16)
}

// Sane reports whether a client's X-Request-Id is kept: 1-64 characters
// of letters, digits and -_.:, and nothing shaped like an API key, alone
// or inside it (`<key>.1`, `id:<key>`, `<key>:retry`: echoed and logged,
// a key pasted there would be written to the log).
func Sane(v []byte) bool {
	if len(v) == 0 || len(v) > 64 {
		return false
	}
	for _, c := range v {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':') {
			return false
		}
	}
	start, _ := apikey.FindKeyShape(v)
	return start < 0
}
