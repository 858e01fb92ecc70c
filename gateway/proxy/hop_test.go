package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/valyala/fasthttp"

	"vendorgate/shared/wire"
)

// rawBackend is a backend on a real loopback socket that records each
// request as it arrived and answers with response, written byte for byte,
// so that headers net/http would manage itself reach the gateway as sent.
type rawBackend struct {
	addr string
	mu   sync.Mutex
	got  []*http.Request
	resp string
}

func startRawBackend(t *testing.T, response string) *rawBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rb := &rawBackend{addr: ln.Addr().String(), resp: response}
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					r, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, r.Body)
					rb.mu.Lock()
					rb.got = append(rb.got, r)
					rb.mu.Unlock()
					if _, err := io.WriteString(c, rb.resp); err != nil {
						return
					}
				}
			}()
		}
	}()
	return rb
}

func (rb *rawBackend) last(t *testing.T) *http.Request {
	t.Helper()
	rb.mu.Lock()
	defer rb.mu.Unlock()
	if len(rb.got) == 0 {
		t.Fatal("the backend received nothing")
	}
	return rb.got[len(rb.got)-1]
}

const okResponse = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"

// forwardRaw parses raw as the gateway's server would (names normalised)
// and forwards it to rb.
func forwardRaw(t *testing.T, rb *rawBackend, raw string) *fasthttp.RequestCtx {
	t.Helper()
	p, err := New(testOptions("http://" + rb.addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	var ctx fasthttp.RequestCtx
	if err := ctx.Request.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		t.Fatal(err)
	}
	id := &Identity{VendorID: "v1", KeyID: "k1", Environment: "sandbox", RequestID: []byte("rid"), ClientIP: []byte("192.0.2.1")}
	if _, err := p.Forward(&ctx, id, false, nil); err != nil {
		t.Fatalf("forward: %v", err)
	}
	return &ctx
}

// TestHopByHopRequestHeaders: what a client sends that is meant for one
// hop only never reaches the backend (RFC 9110 7.6.1), whatever its case:
// the fixed list and every name the client's Connection header lists; the
// end-to-end headers beside them do, and no Connection name can remove
// what the gateway asserts. Each case fails if its header reaches the
// backend (the loops in prepareRequest removed).
func TestHopByHopRequestHeaders(t *testing.T) {
	cases := []struct {
		name    string
		headers string   // raw header lines the client adds
		gone    []string // must not reach the backend
		kept    map[string]string
	}{
		{"Connection-listed names in any case", "Connection: x-Foo, X-BAR ,x-baz\r\nX-Foo: 1\r\nx-bar: 2\r\nX-BAZ: 3\r\nX-Other: 4\r\n",
			[]string{"Connection", "X-Foo", "X-Bar", "X-Baz"}, map[string]string{"X-Other": "4"}},
		{"Connection listing two names, one header each", "Connection: X-A\r\nConnection: X-B\r\nX-A: 1\r\nX-B: 2\r\n",
			[]string{"Connection", "X-A", "X-B"}, nil},
		{"Connection: close", "Connection: close\r\n", []string{"Connection"}, nil},
		{"Keep-Alive in lower case", "keep-alive: timeout=5, max=100\r\nConnection: keep-alive\r\n", []string{"Keep-Alive", "Connection"}, nil},
		{"Proxy-Connection", "Proxy-Connection: keep-alive\r\n", []string{"Proxy-Connection"}, nil},
		{"Proxy-Authorization", "PROXY-AUTHORIZATION: Basic dXNlcjpwYXNz\r\n", []string{"Proxy-Authorization"}, nil},
		{"Proxy-Authenticate", "Proxy-Authenticate: Basic\r\n", []string{"Proxy-Authenticate"}, nil},
		{"TE", "TE: trailers\r\n", []string{"Te"}, nil},
		{"Trailer", "Trailer: X-Checksum\r\n", []string{"Trailer"}, nil},
		{"Upgrade", "Connection: Upgrade\r\nupgrade: websocket\r\n", []string{"Upgrade", "Connection"}, nil},
		{"end-to-end headers pass", "Accept: application/json\r\nIdempotency-Key: idem-1\r\n", nil,
			map[string]string{"Accept": "application/json", "Idempotency-Key": "idem-1"}},
		{"Connection naming an identity header", "Connection: X-Vendor-Id, X-Internal-Token\r\nX-Vendor-Id: evil\r\n", nil,
			map[string]string{wire.HeaderVendorID: "v1", wire.HeaderInternalToken: "token"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rb := startRawBackend(t, okResponse)
			forwardRaw(t, rb, "GET /api/vendor/v1/me HTTP/1.1\r\nHost: gw\r\n"+c.headers+"\r\n")
			r := rb.last(t)
			if r.Close {
				t.Errorf("the backend was asked to close the connection: %v", r.Header)
			}
			for _, name := range c.gone {
				if v, ok := r.Header[http.CanonicalHeaderKey(name)]; ok {
					t.Errorf("%s reached the backend: %q", name, v)
				}
			}
			for name, want := range c.kept {
				if got := r.Header.Values(name); len(got) != 1 || got[0] != want {
					t.Errorf("%s at the backend = %q, want only %q", name, got, want)
				}
			}
		})
	}
}

// TestHopByHopRequestBodyReframed: a chunked body reaches the backend
// whole; the client's Transfer-Encoding is its own hop's framing.
func TestHopByHopRequestBodyReframed(t *testing.T) {
	rb := startRawBackend(t, okResponse)
	forwardRaw(t, rb, "POST /api/vendor/v1/orders HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"+
		"Transfer-Encoding: chunked\r\nTE: trailers\r\n\r\n2\r\n{}\r\n0\r\n\r\n")
	r := rb.last(t)
	if r.ContentLength != 2 || len(r.TransferEncoding) != 0 {
		t.Fatalf("backend framing: Content-Length %d, Transfer-Encoding %q; want 2 and none", r.ContentLength, r.TransferEncoding)
	}
	if _, ok := r.Header["Te"]; ok {
		t.Fatalf("TE reached the backend: %v", r.Header)
	}
}

// TestHopByHopResponseHeaders: a backend's hop-by-hop headers, those its
// Connection header lists and the internal identity headers never reach
// the client; its other headers do. Each case fails if its header is left
// in the response (stripResponse removed).
func TestHopByHopResponseHeaders(t *testing.T) {
	cases := []struct {
		name    string
		headers string
		gone    []string
		kept    map[string]string
	}{
		{"Connection-listed names in any case", "Connection: x-Hop, X-OTHER-HOP\r\nX-Hop: 1\r\nx-other-hop: 2\r\nX-Keep: 3\r\n",
			[]string{"X-Hop", "X-Other-Hop"}, map[string]string{"X-Keep": "3"}},
		{"Connection listing two names, one header each", "Connection: X-A\r\nConnection: X-B\r\nX-A: 1\r\nX-B: 2\r\n",
			[]string{"X-A", "X-B"}, nil},
		{"Keep-Alive in lower case", "keep-alive: timeout=5\r\n", []string{"Keep-Alive"}, nil},
		{"Proxy-Connection", "Proxy-Connection: keep-alive\r\n", []string{"Proxy-Connection"}, nil},
		{"Proxy-Authenticate", "proxy-authenticate: Basic realm=\"backend\"\r\n", []string{"Proxy-Authenticate"}, nil},
		{"Proxy-Authorization", "Proxy-Authorization: Basic eA==\r\n", []string{"Proxy-Authorization"}, nil},
		{"TE", "TE: trailers\r\n", []string{"Te"}, nil},
		{"Trailer", "Trailer: X-Checksum\r\n", []string{"Trailer"}, nil},
		{"Upgrade", "Upgrade: h2c\r\n", []string{"Upgrade"}, nil},
		{"internal identity headers", "X-Internal-Token: t\r\nx-vendor-id: v\r\nX-Key-Id: k\r\nX-Vendor-Environment: live\r\n",
			[]string{wire.HeaderInternalToken, wire.HeaderVendorID, wire.HeaderKeyID, wire.HeaderEnvironment}, nil},
		{"end-to-end headers pass", "Location: /api/vendor/v1/orders/o1\r\nRetry-After: 1\r\n", nil,
			map[string]string{"Location": "/api/vendor/v1/orders/o1", "Retry-After": "1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rb := startRawBackend(t, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"+c.headers+"Content-Length: 2\r\n\r\n{}")
			ctx := forwardRaw(t, rb, "GET /api/vendor/v1/me HTTP/1.1\r\nHost: gw\r\n\r\n")
			h := &ctx.Response.Header
			if h.ConnectionClose() {
				t.Error("the backend's Connection header would close the client's connection")
			}
			seen := map[string][]string{}
			for k, v := range h.All() {
				seen[strings.ToLower(string(k))] = append(seen[strings.ToLower(string(k))], string(v))
			}
			for _, name := range c.gone {
				if v, ok := seen[strings.ToLower(name)]; ok {
					t.Errorf("%s reached the client: %q", name, v)
				}
			}
			for name, want := range c.kept {
				if got := seen[strings.ToLower(name)]; len(got) != 1 || got[0] != want {
					t.Errorf("%s at the client = %q, want only %q", name, got, want)
				}
			}
			if string(ctx.Response.Body()) != "{}" {
				t.Errorf("body %q", ctx.Response.Body())
			}
		})
	}
}
