package backend

import (
	"bufio"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"vendorgate/shared/testslow"
	"vendorgate/shared/wire"
)

// largeReport completes a live order's mvr through the admin API with a
// small PDF, then puts size random bytes in its file's place (a large
// upload is slow under -race), and returns the vendor, the report's path
// and the file's SHA-256.
func largeReport(h *harness, size int) (vendorID, path string, sum [32]byte) {
	h.t.Helper()
	vendorID = h.newVendor("live", "mvr")
	o := h.mustPlace(vendorID, "D7654321", "mvr")
	pdf := base64.StdEncoding.EncodeToString([]byte("%PDF-1.4\n%%EOF\n"))
	if r := h.adminCall("POST", "/admin/v1/orders/"+o.OrderID+"/complete", `{"service":"mvr","report_pdf_base64":"`+pdf+`"}`); r.status != 200 {
		h.t.Fatalf("complete: %d %s", r.status, r.body)
	}
	b := make([]byte, size)
	if _, err := rand.Read(b); err != nil {
		h.t.Fatal(err)
	}
	copy(b, "%PDF-1.4\n")
	tmp := filepath.Join(h.dir, "large.pdf")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		h.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(h.dir, "reports", o.OrderID, "mvr.pdf")); err != nil {
		h.t.Fatal(err)
	}
	return vendorID, "/api/vendor/v1/orders/" + o.OrderID + "/reports/mvr", sha256.Sum256(b)
}

// slowRead is what a reader on a slow link got.
type slowRead struct {
	status        int
	contentLength int64
	n             int64
	sum           [32]byte
	err           error // nil when the body ended whole
	took          time.Duration
}

// readSlowly asks for path as the gateway would, over a connection with a
// small receive buffer; it waits stall after the head, then reads 32 KiB
// at a time paced to bytesPerSec (0: as fast as bytes come), all within
// limit.
func readSlowly(h *harness, vendorID, path string, stall time.Duration, bytesPerSec int, limit time.Duration) slowRead {
	h.t.Helper()
	c, err := (&net.Dialer{Control: testslow.SmallReceiveBuffer}).Dial("tcp", h.b.Addr())
	if err != nil {
		h.t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_ = c.SetDeadline(start.Add(limit))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: backend\r\n%s: %s\r\n%s: %s\r\n\r\n", path,
		wire.HeaderInternalToken, testInternalToken, wire.HeaderVendorID, vendorID)
	resp, err := http.ReadResponse(bufio.NewReaderSize(c, 4096), nil)
	if err != nil {
		h.t.Fatalf("read the answer's head: %v", err)
	}
	defer resp.Body.Close()
	r := slowRead{status: resp.StatusCode, contentLength: resp.ContentLength}
	r.n, r.sum, r.err = testslow.ReadBody(resp.Body, start, stall, bytesPerSec)
	r.took = time.Since(start)
	return r
}

// A report read slowly arrives whole: each write is bounded by progress.
func TestReportReachesSlowReader(t *testing.T) {
	const size = 16 << 20
	h := start(t, func(o *Options) { o.Config.StreamIdleTimeout = 5 * time.Second })
	v, path, sum := largeReport(h, size)
	r := readSlowly(h, v, path, 0, 4<<20, time.Minute)
	t.Logf("received %d of %d bytes in %s", r.n, size, r.took.Round(time.Millisecond))
	if r.status != 200 || r.contentLength != size || r.err != nil || r.n != size || r.sum != sum {
		t.Fatalf("status %d, Content-Length %d, body %d of %d bytes (read error %v), sha256 match %v",
			r.status, r.contentLength, r.n, size, r.err, r.sum == sum)
	}
}

// A reader that stops reading is cut once the idle timeout passes, long
// before the listener's 60s write timeout: it finds the connection closed
// short of Content-Length.
func TestStalledReportReaderIsCut(t *testing.T) {
	const size = 16 << 20
	h := start(t, func(o *Options) { o.Config.StreamIdleTimeout = time.Second })
	v, path, _ := largeReport(h, size)
	r := readSlowly(h, v, path, 4*time.Second, 0, 20*time.Second)
	t.Logf("received %d of %d bytes in %s: %v", r.n, size, r.took.Round(time.Millisecond), r.err)
	var ne net.Error
	if r.status != 200 || r.err == nil || errors.As(r.err, &ne) && ne.Timeout() || r.n >= size {
		t.Fatalf("status %d, %d of %d bytes, read error %v; want 200 and the connection closed short", r.status, r.n, size, r.err)
	}
}
