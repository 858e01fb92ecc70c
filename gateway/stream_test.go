package gateway

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"vendorgate/shared/apierr"
	"vendorgate/shared/testslow"
	"vendorgate/shared/wire"
)

// download is what a raw client got for a report.
type download struct {
	status        int
	contentLength int64
	n             int64
	sum           [32]byte
	err           error // the body's read error; nil when it ended whole
	took          time.Duration
}

// client is how fetch reads.
type client struct {
	// waitFor, when set, runs after the head, before the stall: the
	// client reads nothing until it returns.
	waitFor func()
	// stall is how long it waits after the head before reading the body.
	stall time.Duration
	// bytesPerSec paces its 32 KiB reads; 0 reads as fast as bytes come.
	bytesPerSec int
	// smallBuffer shrinks its socket receive buffer (a slow link's window).
	smallBuffer bool
	// limit bounds the whole exchange: a gateway that neither sends nor
	// closes shows as the client's own timeout.
	limit time.Duration
	// tls, when set, speaks TLS over the connection.
	tls *tls.Config
}

// downloadsLetGo is a stalled client's wait (client.waitFor): until the
// gateway has let go of every download (its in-flight downloads at 0: a
// stream is cut once its writes made no progress for
// stream_idle_timeout), at most 15 s. A fixed stall let a download through
// whole on a loaded machine: the gateway had not yet filled the sockets'
// buffers when the client read again, so its idle bound had not begun.
func downloadsLetGo(t *testing.T, gw *testGateway) func() {
	return func() {
		for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			if metricValue(t, gw, "vendorgate_gateway_in_flight_downloads") == 0 {
				return
			}
		}
	}
}

// fetch downloads rawURL over a connection of its own, as cl reads.
func fetch(t *testing.T, rawURL, key string, cl client) download {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	var dialer net.Dialer
	if cl.smallBuffer {
		dialer.Control = testslow.SmallReceiveBuffer
	}
	c, err := dialer.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_ = c.SetDeadline(start.Add(cl.limit))
	if cl.tls != nil {
		c = tls.Client(c, cl.tls)
	}
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n%s: %s\r\n\r\n", u.RequestURI(), u.Host, wire.HeaderAPIKey, key)
	resp, err := http.ReadResponse(bufio.NewReaderSize(c, 4096), nil)
	if err != nil {
		t.Fatalf("read the answer's head: %v", err)
	}
	defer resp.Body.Close()
	d := download{status: resp.StatusCode, contentLength: resp.ContentLength}
	if cl.waitFor != nil {
		cl.waitFor()
	}
	d.n, d.sum, d.err = testslow.ReadBody(resp.Body, start, cl.stall, cl.bytesPerSec)
	d.took = time.Since(start)
	return d
}

func randomBody(t *testing.T, size int) ([]byte, [32]byte) {
	t.Helper()
	b := make([]byte, size)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b, sha256.Sum256(b)
}

// isTimeout reports whether err is the client's own deadline: the gateway
// neither sent nor closed.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// A report much larger than the socket buffers, read by a slow client
// through a gateway whose proxy timeout is far shorter than the download,
// arrives whole: the stream is bounded by progress, not as a whole.
func TestReportReachesSlowClient(t *testing.T) {
	const size = 16 << 20
	body, sum := randomBody(t, size)
	b := newTestBackend(t)
	b.setReport(func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/pdf")
		ctx.SetBody(body)
	})
	// The proxy timeout is also the wait for the answer to begin: 2 s
	// leaves a loaded machine under -race room for a 16 MiB answer's
	// first byte (1 s gave a 504 now and then), and is still half the
	// download's 4 s.
	gw := startGateway(t, b, func(o *Options) {
		o.Config.Proxy.Timeout = 2 * time.Second
		o.Config.Proxy.StreamIdleTimeout = 5 * time.Second
	})
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	d := fetch(t, gw.url+"/api/vendor/v1/orders/o1/reports/mvr", key, client{bytesPerSec: 4 << 20, smallBuffer: true, limit: time.Minute})
	if d.took < 2*time.Second && d.status == 200 {
		t.Fatalf("the download took %s, not longer than the proxy timeout: the test no longer shows a stream bounded by progress", d.took)
	}
	t.Logf("received %d of %d bytes in %s", d.n, size, d.took.Round(time.Millisecond))
	if d.status != 200 || d.contentLength != size || d.err != nil || d.n != size || d.sum != sum {
		t.Fatalf("status %d, Content-Length %d, body %d of %d bytes (read error %v), sha256 match %v",
			d.status, d.contentLength, d.n, size, d.err, d.sum == sum)
	}
}

// A client that stops reading is cut once the idle timeout passes with no
// byte taken, long before the whole-answer write timeout (proxy timeout +
// 30s): it finds the connection closed short of Content-Length.
func TestStalledClientIsCut(t *testing.T) {
	const size = 16 << 20 // more than the client side of the connection buffers
	body, _ := randomBody(t, size)
	b := newTestBackend(t)
	b.setReport(func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/pdf")
		ctx.SetBody(body)
	})
	gw := startGateway(t, b, func(o *Options) {
		o.Config.Proxy.Timeout = 30 * time.Second
		o.Config.Proxy.StreamIdleTimeout = time.Second
	})
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	d := fetch(t, gw.url+"/api/vendor/v1/orders/o1/reports/mvr", key, client{waitFor: downloadsLetGo(t, gw), smallBuffer: true, limit: 20 * time.Second})
	t.Logf("received %d of %d bytes in %s: %v", d.n, size, d.took.Round(time.Millisecond), d.err)
	if d.status != 200 || d.contentLength != size {
		t.Fatalf("status %d, Content-Length %d", d.status, d.contentLength)
	}
	if d.err == nil || isTimeout(d.err) || d.n >= size {
		t.Fatalf("stalled client: %d of %d bytes, read error %v; want the connection closed short", d.n, size, d.err)
	}
	// The gateway released its backend connection with the client's: the
	// next report streams whole.
	b.setReport(func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("%PDF-small") })
	if a := do(t, "GET", gw.url+"/api/vendor/v1/orders/o1/reports/mvr", key); a.status != 200 || string(a.body) != "%PDF-small" {
		t.Fatalf("next report: %d %q", a.status, a.body)
	}
}

// A backend that stops sending mid-report makes the gateway abort the
// client's connection once the idle timeout passes: the client sees a body
// short of its Content-Length, or without the last chunk, never a clean
// end; and before the proxy timeout (30s here) would have cut it.
func TestBackendStallAbortsClient(t *testing.T) {
	const sent = 1 << 20
	for _, chunked := range []bool{false, true} {
		t.Run(fmt.Sprintf("chunked=%v", chunked), func(t *testing.T) {
			release := make(chan struct{})
			b := newTestBackend(t)
			t.Cleanup(func() { close(release) }) // before the backend stops
			b.setReport(func(ctx *fasthttp.RequestCtx) {
				ctx.SetContentType("application/pdf")
				half := make([]byte, sent)
				if chunked {
					ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
						_, _ = w.Write(half)
						_ = w.Flush()
						<-release
					})
					return
				}
				ctx.SetBodyStream(io.MultiReader(bytes.NewReader(half), stallReader(release)), 4*sent)
			})
			gw := startGateway(t, b, func(o *Options) {
				o.Config.Proxy.Timeout = 30 * time.Second
				o.Config.Proxy.StreamIdleTimeout = time.Second
			})
			key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
			d := fetch(t, gw.url+"/api/vendor/v1/orders/o1/reports/mvr", key, client{limit: 20 * time.Second})
			t.Logf("received %d bytes (Content-Length %d) in %s: %v", d.n, d.contentLength, d.took.Round(time.Millisecond), d.err)
			if d.status != 200 || d.n != sent {
				t.Fatalf("status %d, %d bytes; want 200 and the %d bytes sent", d.status, d.n, sent)
			}
			if !errors.Is(d.err, io.ErrUnexpectedEOF) {
				t.Fatalf("read error %v; want the connection closed mid-body (unexpected EOF)", d.err)
			}
		})
	}
}

// A report whose answer does not begin within the proxy timeout is a 504,
// as any other call: only the body is bounded by progress.
func TestReportHeadBoundedByProxyTimeout(t *testing.T) {
	b := newTestBackend(t)
	b.setReport(func(ctx *fasthttp.RequestCtx) {
		time.Sleep(1500 * time.Millisecond)
		ctx.SetBodyString("%PDF-late")
	})
	gw := startGateway(t, b, func(o *Options) {
		o.Config.Proxy.Timeout = 500 * time.Millisecond
		o.Config.Proxy.StreamIdleTimeout = 10 * time.Second
	})
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	do(t, "GET", gw.url+"/api/vendor/v1/orders/o1/reports/mvr", key).wantError(t, 504, apierr.RequestFailed)
}

// stallReader blocks until release is closed.
type stallReader chan struct{}

func (r stallReader) Read(p []byte) (int, error) {
	<-r
	return 0, io.ErrUnexpectedEOF
}
