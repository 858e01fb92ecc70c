package serverlog

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
)

// Every line fasthttp's server may print goes through Printf with the
// request's bytes in its arguments; none of them may come out.
func TestPrintfDropsRequestBytes(t *testing.T) {
	const secret = "vgsandbx_SECRETSECRETSECRETSECRETSECRETSECRETSEC"
	local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}
	peer := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 51000}
	parse := fmt.Errorf("error when reading request headers: malformed mime header: missing colon: %q: buffer size=99, contents: %q",
		"Bad Header Line", "GET / HTTP/1.1\r\nX-API-Key: "+secret+"\r\n")
	cases := []struct {
		format string
		args   []any
		want   []string
	}{
		{connErrorFormat, []any{local, peer, parse}, []string{`"msg":"malformed request"`, `"kind":"malformed header line"`, `"peer":"192.0.2.7:51000"`}},
		{connErrorFormat, []any{local, peer, errors.New(`error when reading request headers: unsupported http version "` + secret + `"`)},
			[]string{`"kind":"unsupported http version"`}},
		{connErrorFormat, []any{local, peer, errors.New(`error when reading request headers: "` + secret + ` content-length"`)},
			[]string{`"kind":"malformed headers"`}}, // words inside the quotes do not choose the kind
		{connErrorFormat, []any{local, peer, errors.New(secret)}, []string{`"msg":"connection error"`, `"kind":"other"`}},
		{"The number of connections from %s exceeds MaxConnsPerIP=%d", []any{secret, 10}, []string{`"arg1":10`}},
		{"%.3f %s - %s", []any{1.5, secret, secret}, []string{`"arg0":1.5`}},
	}
	for _, c := range cases {
		var out bytes.Buffer
		Printer{Log: slog.New(slog.NewJSONHandler(&out, nil))}.Printf(c.format, c.args...)
		if strings.Contains(out.String(), "SECRET") || strings.Contains(out.String(), "Bad Header") {
			t.Errorf("%q logged request bytes: %s", c.format, out.String())
		}
		for _, w := range c.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%q: %s lacks %s", c.format, out.String(), w)
			}
		}
	}
}
