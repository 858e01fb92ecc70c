// Package bearer checks an admin token sent as "Authorization: Bearer
// TOKEN" against the header as the client wrote it.
//
// fasthttp trims the whitespace around a header's value, as HTTP allows,
// so "Bearer TOKEN " reads as "Bearer TOKEN" and a second Authorization
// line is never seen: a token followed by a space or a tab, or sent twice
// with two values, would pass. An admin token is a secret compared to the
// byte: here the one Authorization line of the request must hold exactly
// "Bearer " and the token.
package bearer

import (
	"bytes"
	"crypto/subtle"

	"github.com/valyala/fasthttp"
)

// Matches reports whether h carries exactly one Authorization header whose
// value, as sent, is "Bearer " followed by token and nothing else. The
// comparison of the token takes the same time whatever it holds.
func Matches(h *fasthttp.RequestHeader, token []byte) bool {
	want := append([]byte("Bearer "), token...)
	raw := h.RawHeaders()
	if len(raw) == 0 {
		// A request built in process, not read from a connection.
		return subtle.ConstantTimeCompare(h.Peek(fasthttp.HeaderAuthorization), want) == 1
	}
	var value []byte
	seen := 0
	for len(raw) > 0 {
		line, rest, _ := bytes.Cut(raw, []byte("\n"))
		raw = rest
		line = bytes.TrimSuffix(line, []byte("\r"))
		name, v, ok := bytes.Cut(line, []byte(":"))
		if !ok || !bytes.EqualFold(name, []byte(fasthttp.HeaderAuthorization)) {
			continue
		}
		seen++
		value = bytes.TrimLeft(v, " \t")
	}
	return seen == 1 && subtle.ConstantTimeCompare(value, want) == 1
}
