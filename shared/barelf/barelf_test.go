package barelf

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// serve runs a fasthttp server on a loopback listener wrapped in
// NewListener: it echoes the body, and answers a read error 400.
func serve(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{
		Handler:      func(ctx *fasthttp.RequestCtx) { ctx.SetBody(append([]byte("ok:"), ctx.PostBody()...)) },
		ErrorHandler: func(ctx *fasthttp.RequestCtx, err error) { ctx.Error("refused", 400) },
		ReadTimeout:  30 * time.Second,
	}
	go func() { _ = srv.Serve(NewListener(ln)) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return ln.Addr().String()
}

// exchange sends the parts, each in its own write a little apart (a head
// split across reads), and reads n answers. The deadline is the failure
// signal of a server that holds the connection, not a measure of speed.
func exchange(t *testing.T, addr string, n int, parts ...string) []string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	for _, p := range parts {
		if _, err := io.WriteString(c, p); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	br := bufio.NewReader(c)
	var out []string
	for range n {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("answer %d: %v", len(out)+1, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		out = append(out, resp.Status[:3]+" "+string(body))
	}
	return out
}

func TestBareLFHeadRefusedAtOnce(t *testing.T) {
	addr := serve(t)
	for _, parts := range [][]string{
		{"GET / HTTP/1.1\nHost: x\n\n"},
		{"GET / HTTP/1.1\r\nHost: x\r\n\n"},
		{"GET / HTTP/1.1\r\nHost: x\n\r\n"},
		{"GET / HTTP/1.1\r\nHost: x\r", "\n\n"},
		{"GE", "T / HTTP/1.1\nHo", "st: x\n", "\n"},
		{"POST / HTTP/1.1\nHost: x\nContent-Length: 5\n\nhello"},
	} {
		if got := exchange(t, addr, 1, parts...); got[0] != "400 refused" {
			t.Errorf("%q: %q, want 400", parts, got)
		}
	}
}

// What fasthttp reads well is read as before: CRLF heads however split,
// bare-LF header lines ended by CRLFCRLF, bodies holding blank lines,
// pipelined requests, a 100-continue body.
func TestWellFormedHeadsServed(t *testing.T) {
	addr := serve(t)
	post := "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\na\n\nb\r\n\n\nc"
	for _, c := range []struct {
		parts []string
		want  []string
	}{
		{[]string{"GET / HTTP/1.1\r\nHost: x\r\n\r\n"}, []string{"200 ok:"}},
		{[]string{"GET / HTTP/1.1\r\nHost: x\r\n\r", "\n"}, []string{"200 ok:"}},
		{[]string{"GET / HTTP/1.1\r", "\nHost: x\r\n", "\r\n"}, []string{"200 ok:"}},
		{[]string{"GET / HTTP/1.1\nHost: x\r\n\r\n"}, []string{"200 ok:"}},
		{[]string{post}, []string{"200 ok:a\n\nb\r\n\n\nc"}},
		{[]string{"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\na\n", "\nb\r\n\n\nc"}, []string{"200 ok:a\n\nb\r\n\n\nc"}},
		{[]string{post + post, post}, []string{"200 ok:a\n\nb\r\n\n\nc", "200 ok:a\n\nb\r\n\n\nc", "200 ok:a\n\nb\r\n\n\nc"}},
		{[]string{"POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 8\r\n\r\n", "AB C\n\nxy"}, []string{"100 ", "200 ok:AB C\n\nxy"}},
		{[]string{"\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n"}, []string{"200 ok:"}},
	} {
		got := exchange(t, addr, len(c.want), c.parts...)
		if strings.Join(got, "|") != strings.Join(c.want, "|") {
			t.Errorf("%q: %q, want %q", c.parts, got, c.want)
		}
	}
}

// nopConn is a connection whose reads return the same request head.
type nopConn struct {
	net.Conn
	head []byte
}

func (c nopConn) Read(p []byte) (int, error)  { return copy(p, c.head), nil }
func (c nopConn) Write(p []byte) (int, error) { return len(p), nil }

// BenchmarkReadHead is the cost a Conn adds to one request: its head read
// and looked through, then the answer written.
func BenchmarkReadHead(b *testing.B) {
	head := []byte("GET /api/vendor/v1/orders/ord_0123456789abcdef HTTP/1.1\r\nHost: api.vendorgate.test\r\n" +
		"User-Agent: vendor-client/1.0\r\nAccept: application/json\r\nX-API-Key: vgsandbx_" + strings.Repeat("k", 43) +
		"\r\nX-Request-Id: 3f2504e0-4f89-11d3-9a0c-0305e82c3301\r\nAccept-Encoding: gzip\r\n\r\n")
	c := New(nopConn{head: head})
	buf := make([]byte, 4096)
	b.ReportAllocs()
	b.SetBytes(int64(len(head)))
	for b.Loop() {
		if _, err := c.Read(buf); err != nil {
			b.Fatal(err)
		}
		_, _ = c.Write(buf[:1])
	}
}
