package respond

import (
	"bufio"
	"net"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// A body over the server's limit is 413 payload_too_large whether it is
// announced by Content-Length or sent chunked: fasthttp reports both as
// ErrBodyTooLarge, so no error text needs matching.
func TestServerErrorHandlerBodyTooLarge(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{
		Handler:            func(ctx *fasthttp.RequestCtx) { ctx.SetStatusCode(200) },
		ErrorHandler:       ServerErrorHandler,
		MaxRequestBodySize: 64,
		Logger:             quiet{},
	}
	go srv.Serve(ln) //nolint:errcheck // ends at Shutdown
	t.Cleanup(func() { _ = srv.Shutdown() })

	big := strings.Repeat("x", 200)
	for name, raw := range map[string]string{
		"content-length": "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 200\r\n\r\n" + big,
		"chunked":        "POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nc8\r\n" + big + "\r\n0\r\n\r\n",
		"malformed":      "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: nope\r\n\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write([]byte(raw)); err != nil {
				t.Fatal(err)
			}
			var resp fasthttp.Response
			if err := resp.Read(bufio.NewReader(c)); err != nil {
				t.Fatal(err)
			}
			want, code := 413, "payload_too_large"
			if name == "malformed" {
				want, code = 400, "validation_error"
			}
			if resp.StatusCode() != want || !strings.Contains(string(resp.Body()), `"code":"`+code+`"`) {
				t.Fatalf("%d %s, want %d %s", resp.StatusCode(), resp.Body(), want, code)
			}
			if cc := string(resp.Header.Peek(fasthttp.HeaderCacheControl)); cc != "no-store" {
				t.Errorf("Cache-Control %q, want no-store", cc)
			}
		})
	}
}

type quiet struct{}

func (quiet) Printf(string, ...any) {}
