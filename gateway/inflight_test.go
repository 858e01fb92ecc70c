package gateway

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"vendorgate/config"
	"vendorgate/shared/apierr"
	"vendorgate/shared/testslow"
	"vendorgate/shared/wire"
)

// held is a report download a client started and stopped reading: the
// gateway has sent the head and is stuck writing the body.
type held struct {
	status int
	header http.Header
	body   []byte // the body of an answer other than 200
	conn   net.Conn
	resp   *http.Response
}

// holdDownload asks for rawURL over a connection of its own with a small
// receive buffer and reads the answer's head only; the caller closes it.
func holdDownload(t *testing.T, rawURL, key string) *held {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	d := net.Dialer{Control: testslow.SmallReceiveBuffer}
	c, err := d.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n%s: %s\r\n\r\n", u.RequestURI(), u.Host, wire.HeaderAPIKey, key)
	resp, err := http.ReadResponse(bufio.NewReaderSize(c, 4096), nil)
	if err != nil {
		t.Fatalf("read the answer's head: %v", err)
	}
	h := &held{status: resp.StatusCode, header: resp.Header, conn: c, resp: resp}
	if resp.StatusCode != 200 {
		h.body, _ = io.ReadAll(resp.Body)
	}
	return h
}

// wantRefused checks a 429 rate_limited with a Retry-After of whole
// seconds.
func (h *held) wantRefused(t *testing.T) {
	t.Helper()
	a := answer{status: h.status, header: h.header, body: h.body}
	a.env, a.isEnv = apierr.Parse(h.body)
	a.wantError(t, 429, apierr.RateLimited)
	if s, err := strconv.Atoi(h.header.Get("Retry-After")); err != nil || s < 1 {
		t.Fatalf("Retry-After %q; want whole seconds, at least 1", h.header.Get("Retry-After"))
	}
}

// waitInFlight waits until vendor has requests and downloads in flight at
// gw (a released slot is given back when the gateway sees the end of its
// answer, a moment after the client's).
func waitInFlight(t *testing.T, gw *testGateway, vendor string, requests, downloads int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		r, d := gw.g.inflight.InFlight(vendor)
		if r == requests && d == downloads {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has %d requests and %d downloads in flight; want %d and %d", vendor, r, d, requests, downloads)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// bigReport answers every report with a body far larger than the socket
// buffers, so that a client that stops reading holds the download. The body
// streams from one shared slice: copying 16 MiB into each answer before its
// head took the test backend 50-100 ms under -race, and past a 500 ms
// proxy.timeout on a loaded machine, so that the gateway rightly answered
// 504 where a test meant a backend that answers at once.
func bigReport(b *testBackend, size int) {
	body := make([]byte, size)
	b.setReport(func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/pdf")
		ctx.SetBodyStream(bytes.NewReader(body), len(body))
	})
}

const reportPath = "/api/vendor/v1/orders/o1/reports/mvr"

// One vendor holding as many slow report downloads as its cap allows gets
// 429 rate_limited with Retry-After for the next one (by any of its keys),
// while its reads and
// another vendor's downloads are served; a vendor with caps of its own is
// held to them; a download closed gives its slot back.
func TestDownloadsPastCapRefused(t *testing.T) {
	b := newTestBackend(t)
	bigReport(b, 16<<20)
	gw := startGateway(t, b, func(o *Options) {
		o.Config.Limits.Vendor.Reads = config.Limit{Rate: 1000, Period: time.Minute}
		o.Config.InFlight.Requests, o.Config.InFlight.Downloads = 3, 2
		o.Config.InFlight.Overrides = map[string]config.InFlightCaps{"vendor-c": {Downloads: 1}}
		o.Config.Proxy.StreamMinRate = 0 // the floor is not what is tested
	})
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	other, _ := b.addKey("vendor-b", wire.VendorApproved, time.Now().Add(time.Hour))
	small, _ := b.addKey("vendor-c", wire.VendorApproved, time.Now().Add(time.Hour))

	var holding []*held
	for range 2 {
		h := holdDownload(t, gw.url+reportPath, key)
		if h.status != 200 {
			t.Fatalf("download within the cap: %d %s", h.status, h.body)
		}
		holding = append(holding, h)
	}
	holdDownload(t, gw.url+reportPath, key).wantRefused(t)
	if m := metricValue(t, gw, `vendorgate_gateway_in_flight_refused_total{cap="downloads"}`); m != 1 {
		t.Fatalf("in_flight_refused_total{cap=downloads} = %v; want 1", m)
	}
	// The caps are the vendor's, across its keys: its second key's
	// download is refused too.
	second, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	holdDownload(t, gw.url+reportPath, second).wantRefused(t)
	// Its reads are requests in flight too, within their own cap.
	if a := do(t, "GET", gw.url+"/api/vendor/v1/me", key); a.status != 200 {
		t.Fatalf("a read beside the downloads: %d %s", a.status, a.body)
	}
	// Another vendor's downloads count against its own caps.
	if d := fetch(t, gw.url+reportPath, other, client{limit: 20 * time.Second}); d.status != 200 || d.err != nil || d.n != 16<<20 {
		t.Fatalf("another vendor's download: %d, %d bytes, %v", d.status, d.n, d.err)
	}
	// A vendor's override is its cap.
	if h := holdDownload(t, gw.url+reportPath, small); h.status != 200 {
		t.Fatalf("vendor-c's first download: %d %s", h.status, h.body)
	}
	holdDownload(t, gw.url+reportPath, small).wantRefused(t)

	// Past the requests cap (3: two downloads and a slow read), a read is
	// refused too.
	b.delay.Store(int64(1500 * time.Millisecond)) // within the proxy timeout (2s)
	slow := make(chan answer, 1)
	go func() { slow <- do(t, "GET", gw.url+"/api/vendor/v1/orders/slow", key) }()
	waitInFlight(t, gw, "vendor-a", 3, 2)
	a := do(t, "GET", gw.url+"/api/vendor/v1/me", key)
	a.wantError(t, 429, apierr.RateLimited)
	if a.header.Get("Retry-After") == "" {
		t.Fatalf("no Retry-After: %v", a.header)
	}
	if a := <-slow; a.status != 200 {
		t.Fatalf("the slow read: %d %s", a.status, a.body)
	}

	// Closed downloads give their slots back.
	for _, h := range holding {
		h.conn.Close()
	}
	waitInFlight(t, gw, "vendor-a", 0, 0)
	if d := fetch(t, gw.url+reportPath, key, client{limit: 20 * time.Second}); d.status != 200 || d.err != nil || d.n != 16<<20 {
		t.Fatalf("a download after the held ones closed: %d, %d bytes, %v", d.status, d.n, d.err)
	}
}

// With the backend's stream pool full of one vendor's slow downloads (more
// of them than the pool holds), another vendor's reads are answered 200:
// report streams have a pool of their own.
func TestFullStreamPoolLeavesReads(t *testing.T) {
	b := newTestBackend(t)
	bigReport(b, 16<<20)
	gw := startGateway(t, b, func(o *Options) {
		o.Config.Limits.Vendor.Reads = config.Limit{Rate: 1000, Period: time.Minute}
		o.Config.Proxy.StreamMaxConns = 2
		o.Config.Proxy.StreamMinRate = 0 // the floor is not what is tested
	})
	attacker, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	key, _ := b.addKey("vendor-b", wire.VendorApproved, time.Now().Add(time.Hour))
	// Warm the other vendor's key, so that its reads' timing is theirs.
	if a := do(t, "GET", gw.url+"/api/vendor/v1/me", key); a.status != 200 {
		t.Fatalf("%d %s", a.status, a.body)
	}
	before := readLatencies(t, gw, key, 20)

	streaming, full := 0, 0
	for range 4 { // twice the pool
		switch h := holdDownload(t, gw.url+reportPath, attacker); {
		case h.status == 200:
			streaming++
		case h.status == 503:
			full++ // the stream pool is full: this vendor's own download waits no longer
		default:
			t.Fatalf("a download past the stream pool: %d %s", h.status, h.body)
		}
	}
	if streaming != 2 || full != 2 {
		t.Fatalf("%d downloads streaming, %d refused for a full pool; want 2 and 2", streaming, full)
	}
	during := readLatencies(t, gw, key, 20)
	t.Logf("the other vendor's 20 reads: median %s before, %s with the stream pool full", median(before), median(during))
}

// readLatencies sends n reads of the order route one at a time and fails
// unless each answers 200; it returns their latencies.
func readLatencies(t *testing.T, gw *testGateway, key string, n int) []time.Duration {
	t.Helper()
	var out []time.Duration
	for i := range n {
		start := time.Now()
		a := do(t, "GET", gw.url+"/api/vendor/v1/orders/o"+strconv.Itoa(i), key)
		out = append(out, time.Since(start))
		if a.status != 200 {
			t.Fatalf("read %d of %d: %d %s", i+1, n, a.status, a.body)
		}
	}
	return out
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2].Round(10 * time.Microsecond)
}

// A client that takes a few bytes now and then is cut once its download
// falls below the minimum rate after the grace, although each write still
// makes progress within the idle timeout; its slot and its backend
// connection come back (the next download, with a cap of one and a pool of
// one, is served whole).
func TestTricklingClientIsCut(t *testing.T) {
	const size = 16 << 20
	b := newTestBackend(t)
	bigReport(b, size)
	gw := startGateway(t, b, func(o *Options) {
		o.Config.InFlight.Downloads = 1
		o.Config.Proxy.StreamMaxConns = 1
		o.Config.Proxy.StreamIdleTimeout = 30 * time.Second // far longer than the test: idle never cuts
		o.Config.Proxy.StreamMinRate = 256 << 10
		o.Config.Proxy.StreamMinRateWindow = time.Second
		o.Config.Proxy.StreamMinRateGrace = time.Second
	})
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))

	h := holdDownload(t, gw.url+reportPath, key)
	if h.status != 200 {
		t.Fatalf("%d %s", h.status, h.body)
	}
	// Trickle: 1 KiB every 100 ms (10 KiB/s) for 8 s, then read the rest as
	// fast as it comes: a download cut while trickling ends short.
	start := time.Now()
	buf := make([]byte, 1<<10)
	var n int64
	var rerr error
	for time.Since(start) < 8*time.Second && rerr == nil {
		var m int
		m, rerr = io.ReadFull(h.resp.Body, buf)
		n += int64(m)
		time.Sleep(100 * time.Millisecond)
	}
	if rerr == nil {
		var m int64
		m, rerr = io.Copy(io.Discard, h.resp.Body)
		n += m
	}
	t.Logf("the trickling client got %d of %d bytes in %s: %v", n, size, time.Since(start).Round(time.Millisecond), rerr)
	if rerr == nil || isTimeout(rerr) || n >= size {
		t.Fatalf("trickling client: %d of %d bytes, read error %v; want the download cut short", n, size, rerr)
	}
	if m := metricValue(t, gw, "vendorgate_gateway_streams_too_slow_total"); m != 1 {
		t.Fatalf("streams_too_slow_total = %v; want 1", m)
	}
	waitInFlight(t, gw, "vendor-a", 0, 0)
	if d := fetch(t, gw.url+reportPath, key, client{limit: 20 * time.Second}); d.status != 200 || d.err != nil || d.n != size {
		t.Fatalf("the next download: %d, %d bytes, %v", d.status, d.n, d.err)
	}
}

// panicOnce is a log handler that panics on the first access log line of
// one route (a panic in the flow after the slot was taken), then discards.
type panicOnce struct {
	slog.Handler
	route atomic.Pointer[string]
}

func (h *panicOnce) Handle(ctx context.Context, r slog.Record) error {
	if want := h.route.Load(); want != nil {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "route" && a.Value.String() == *want && h.route.CompareAndSwap(want, nil) {
				panic("test panic after the slot was taken")
			}
			return true
		})
	}
	return h.Handler.Handle(ctx, r)
}

func (h *panicOnce) WithAttrs(as []slog.Attr) slog.Handler { return h }
func (h *panicOnce) WithGroup(string) slog.Handler         { return h }

// Every way an answer ends gives its slot back exactly once: after each,
// the vendor has nothing in flight, and with caps of one request and one
// download, one download is admitted and the next refused (a slot given
// back twice would admit two).
func TestSlotReleasedOnce(t *testing.T) {
	b := newTestBackend(t)
	logs := &panicOnce{Handler: slog.NewJSONHandler(io.Discard, nil)}
	gw := startGateway(t, b, func(o *Options) {
		o.Config.InFlight.Requests, o.Config.InFlight.Downloads = 1, 1
		o.Config.Limits.Vendor.Reads = config.Limit{Rate: 1000, Period: time.Minute}
		// proxy.timeout is also the wait for a streamed answer to begin:
		// the backend here shares the test's CPU, and under -race on a
		// loaded machine its head took up to 740 ms, so 500 ms answered
		// 504 where a stall mid-body was meant. The head timeout case
		// never answers, so it needs no short bound.
		o.Config.Proxy.Timeout = 2 * time.Second
		o.Config.Proxy.StreamIdleTimeout = time.Second
		o.Config.Proxy.StreamMinRate = 0
		o.Logger = slog.New(logs)
	})
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	// once checks the caps while a download holds both slots. The held
	// client reads nothing, and the gateway rightly cuts a stream that
	// moves no byte for stream_idle_timeout (1 s here), giving its slot
	// back; under load the two checks can outlast that. So the held
	// download is read to its end after the checks: only a body that
	// arrives whole shows the slots were held throughout, and only then do
	// the checks' answers count; a cut hold is tried again.
	const size = 16 << 20
	once := func(t *testing.T) {
		t.Helper()
		for attempt := 1; ; attempt++ {
			waitInFlight(t, gw, "vendor-a", 0, 0)
			bigReport(b, size)
			h := holdDownload(t, gw.url+reportPath, key)
			if h.status != 200 {
				t.Fatalf("a download after: %d %s", h.status, h.body)
			}
			next := holdDownload(t, gw.url+reportPath, key)
			next.conn.Close()
			read := do(t, "GET", gw.url+"/api/vendor/v1/me", key)
			n, err := io.Copy(io.Discard, h.resp.Body)
			h.conn.Close()
			if err == nil && n == size {
				next.wantRefused(t)
				read.wantError(t, 429, apierr.RateLimited)
				waitInFlight(t, gw, "vendor-a", 0, 0)
				return
			}
			if attempt == 5 {
				t.Fatalf("the held download was cut before the checks ended in %d tries (%d of %d bytes, %v)", attempt, n, size, err)
			}
			t.Logf("the held download was cut before the checks ended (%d of %d bytes, %v): again", n, size, err)
		}
	}
	release := make(chan struct{})
	t.Cleanup(func() { close(release) }) // before the backend stops: the stalled handler ends
	for _, tc := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"client gone mid-stream", func(t *testing.T) {
			bigReport(b, 16<<20)
			h := holdDownload(t, gw.url+reportPath, key)
			if h.status != 200 {
				t.Fatalf("%d %s", h.status, h.body)
			}
			waitInFlight(t, gw, "vendor-a", 1, 1)
			h.conn.Close()
		}},
		{"backend error", func(t *testing.T) {
			b.setReport(func(ctx *fasthttp.RequestCtx) {
				ctx.SetStatusCode(500)
				ctx.SetBodyString("<html>oops</html>")
			})
			do(t, "GET", gw.url+reportPath, key).wantError(t, 500, apierr.InternalError)
		}},
		{"backend refused", func(t *testing.T) {
			b.stop()
			defer b.restart()
			do(t, "GET", gw.url+reportPath, key).wantError(t, 503, apierr.RequestFailed)
		}},
		{"head timeout", func(t *testing.T) {
			b.setReport(func(ctx *fasthttp.RequestCtx) {
				<-release // no head before the test ends
				ctx.SetBodyString("%PDF-late")
			})
			do(t, "GET", gw.url+reportPath, key).wantError(t, 504, apierr.RequestFailed)
		}},
		{"backend stalls mid-body", func(t *testing.T) {
			// The backend sends its head and the first part of the body at
			// once, then stalls. The part is made here, not in the handler:
			// a 1 MiB part made and copied there (twice, through fasthttp's
			// stream pipe) delayed the head's first byte 330-740 ms under
			// -race on a loaded machine, past the 500 ms proxy.timeout, and
			// the gateway rightly answered 504 where a stall mid-body was
			// meant.
			part := bytes.Repeat([]byte("%PDF-"), 1<<10)
			b.setReport(func(ctx *fasthttp.RequestCtx) {
				ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
					_, _ = w.Write(part)
					_ = w.Flush()
					<-release
				})
			})
			d := fetch(t, gw.url+reportPath, key, client{limit: 20 * time.Second})
			if d.status != 200 || d.err == nil || isTimeout(d.err) {
				t.Fatalf("%d, %d bytes, %v; want the download cut by the idle timeout", d.status, d.n, d.err)
			}
		}},
		{"panic after a read", func(t *testing.T) {
			route := "/api/vendor/v1/orders/{order_id}"
			logs.route.Store(&route)
			do(t, "GET", gw.url+"/api/vendor/v1/orders/o1", key).wantError(t, 500, apierr.InternalError)
		}},
		{"panic after a report began streaming", func(t *testing.T) {
			bigReport(b, 1<<20)
			route := "/api/vendor/v1/orders/{order_id}/reports/{service}"
			logs.route.Store(&route)
			do(t, "GET", gw.url+reportPath, key).wantError(t, 500, apierr.InternalError)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.run(t)
			once(t)
		})
	}
}

// The caps reload with the limits: a vendor's override put in on reload
// holds its next download to it, and comes out the same way.
func TestInFlightCapsReload(t *testing.T) {
	b := newTestBackend(t)
	bigReport(b, 16<<20)
	gw := startGateway(t, b, func(o *Options) { o.Config.Proxy.StreamMinRate = 0 })
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	if h := holdDownload(t, gw.url+reportPath, key); h.status != 200 {
		t.Fatalf("%d %s", h.status, h.body)
	}
	s := *gw.cfg
	s.InFlight.Overrides = map[string]config.InFlightCaps{"vendor-a": {Downloads: 1}}
	if err := gw.g.Reload(&s); err != nil {
		t.Fatal(err)
	}
	holdDownload(t, gw.url+reportPath, key).wantRefused(t)
	s.InFlight.Overrides = nil
	if err := gw.g.Reload(&s); err != nil {
		t.Fatal(err)
	}
	if h := holdDownload(t, gw.url+reportPath, key); h.status != 200 {
		t.Fatalf("after the override came out: %d %s", h.status, h.body)
	}
}
