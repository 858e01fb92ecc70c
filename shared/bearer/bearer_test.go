package bearer

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

const token = "bearer-test-token-0123456789"

// TestMatchesTheHeaderAsSent: requests written byte for byte to a real
// fasthttp server; only the one line "Bearer TOKEN" passes.
func TestMatchesTheHeaderAsSent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		if !Matches(&ctx.Request.Header, []byte(token)) {
			ctx.SetStatusCode(401)
		}
	}}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })

	cases := []struct {
		name, headers string
		want          int
	}{
		{"exact", "Authorization: Bearer " + token + "\r\n", 200},
		{"no space after the colon, lower-case name", "authorization:Bearer " + token + "\r\n", 200},
		{"tab after the colon", "Authorization:\tBearer " + token + "\r\n", 200},
		{"none", "", 401},
		{"trailing space", "Authorization: Bearer " + token + " \r\n", 401},
		{"trailing tab", "Authorization: Bearer " + token + "\t\r\n", 401},
		{"two spaces before the token", "Authorization: Bearer  " + token + "\r\n", 401},
		{"lower-case scheme", "Authorization: bearer " + token + "\r\n", 401},
		{"the token alone", "Authorization: " + token + "\r\n", 401},
		{"a prefix of the token", "Authorization: Bearer " + token[:len(token)-1] + "\r\n", 401},
		{"then another", "Authorization: Bearer " + token + "\r\nAuthorization: Bearer x\r\n", 401},
		{"another, then the token", "Authorization: Bearer x\r\nAuthorization: Bearer " + token + "\r\n", 401},
		{"twice", "Authorization: Bearer " + token + "\r\nAuthorization: Bearer " + token + "\r\n", 401},
	}
	for _, c := range cases {
		if got := status(t, ln.Addr().String(), "GET / HTTP/1.1\r\nHost: a\r\n"+c.headers+"Connection: close\r\n\r\n"); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

func status(t *testing.T, addr, raw string) int {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%q: %v", raw, err)
	}
	res.Body.Close()
	return res.StatusCode
}

// A request built in process has no raw header: its value is compared.
func TestMatchesInProcess(t *testing.T) {
	var h fasthttp.RequestHeader
	if Matches(&h, []byte(token)) {
		t.Error("no header matched")
	}
	h.Set("Authorization", "Bearer "+token)
	if !Matches(&h, []byte(token)) {
		t.Error("the token did not match")
	}
	h.Set("Authorization", "Bearer "+token+"x")
	if Matches(&h, []byte(token)) {
		t.Error("another token matched")
	}
}
