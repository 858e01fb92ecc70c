package e2e

import (
	"bufio"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"vendorgate/shared/testslow"
)

// largePDF writes a report file of size bytes that vendorctl accepts (it
// starts as a PDF) and returns its path and SHA-256.
func largePDF(t *testing.T, size int) (string, [32]byte) {
	t.Helper()
	b := make([]byte, size)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	copy(b, "%PDF-1.4\n")
	copy(b[size-6:], "%%EOF\n")
	path := filepath.Join(t.TempDir(), "large.pdf")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, sha256.Sum256(b)
}

// liveReport places a live mvr order through the gateway, completes it as
// an operator does (vendorctl order complete --file, with a small PDF: a
// large upload through the -race backend outlasts vendorctl's 10s timeout),
// then puts the file at path in the report's place in the reports
// directory, and returns the report's URL and the vendor's key.
func (s *stack) liveReport(path string) (fileURL, key string) {
	s.t.Helper()
	_, key = s.newVendor("live", "mvr")
	o := s.place(key, "L7654321", "mvr")
	small := filepath.Join(s.t.TempDir(), "small.pdf")
	if err := os.WriteFile(small, []byte("%PDF-1.4\n%%EOF\n"), 0o600); err != nil {
		s.t.Fatal(err)
	}
	s.mustVendorctl("order", "complete", o.OrderID, "--service", "mvr", "--file", small)
	o = s.poll(key, o.OrderID, 10*time.Second, func(o order) bool { return o.Final })
	if err := os.Rename(path, filepath.Join(s.dataDir, "reports", o.OrderID, "mvr.pdf")); err != nil {
		s.t.Fatal(err)
	}
	for _, sv := range o.Services {
		if sv.Service == "mvr" && sv.FileURL != nil {
			return *sv.FileURL, key
		}
	}
	s.t.Fatalf("completed order has no mvr file_url: %+v", o)
	return "", ""
}

// slowRead is what a slow client got.
type slowRead struct {
	status        int
	contentLength int64
	n             int64
	sum           [32]byte
	err           error // the body's read error; nil when it ended whole
	took          time.Duration
}

// slowGet downloads rawURL as a client on a slow link: a small socket
// receive buffer, reads of 32 KiB paced to bytesPerSec. The whole exchange
// is bounded by limit.
func slowGet(t *testing.T, rawURL, key string, bytesPerSec int, limit time.Duration) slowRead {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	c, err := (&net.Dialer{Control: testslow.SmallReceiveBuffer}).Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_ = c.SetDeadline(start.Add(limit))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nX-API-Key: %s\r\nConnection: close\r\n\r\n", u.RequestURI(), u.Host, key)
	resp, err := http.ReadResponse(bufio.NewReaderSize(c, 4096), nil)
	if err != nil {
		t.Fatalf("read the answer's head: %v", err)
	}
	defer resp.Body.Close()
	r := slowRead{status: resp.StatusCode, contentLength: resp.ContentLength}
	r.n, r.sum, r.err = testslow.ReadBody(resp.Body, start, 0, bytesPerSec)
	r.took = time.Since(start)
	return r
}

// TestLargeReportReachesSlowClient: a report far larger than the socket
// buffers, read by a slow client through a gateway whose proxy timeout is
// much shorter than the download, arrives whole: streamed bodies are bounded
// by progress, not by a whole-response deadline.
func TestLargeReportReachesSlowClient(t *testing.T) {
	// Not parallel: it streams against the gateway's minimum-rate window.
	const size = 16 << 20
	s := newStack(t, stackOptions{gatewayEnv: map[string]string{"GATEWAY_PROXY_TIMEOUT": "1s"}})
	path, sum := largePDF(t, size)
	fileURL, key := s.liveReport(path)

	r := slowGet(t, fileURL, key, 4<<20, 60*time.Second)
	t.Logf("received %d of %d bytes in %s", r.n, int64(size), r.took.Round(time.Millisecond))
	if r.status != 200 || r.contentLength != size {
		t.Fatalf("status %d, Content-Length %d; want 200, %d", r.status, r.contentLength, size)
	}
	if r.err != nil || r.n != size || r.sum != sum {
		t.Fatalf("body: %d of %d bytes (read error %v), sha256 match %v", r.n, size, r.err, r.sum == sum)
	}
}

// TestLargestReportAtOneMBps downloads the largest report the admin API
// accepts (a 64 MiB JSON body carries about 48 MiB of PDF in base64)
// through the default settings at 1 MB/s. It takes about a minute, so it
// runs only when VENDORGATE_E2E_LARGEST_REPORT is set.
func TestLargestReportAtOneMBps(t *testing.T) {
	// Not parallel: it times a download.
	if os.Getenv("VENDORGATE_E2E_LARGEST_REPORT") == "" {
		t.Skip("set VENDORGATE_E2E_LARGEST_REPORT=1 to run (about a minute)")
	}
	// {"service":"mvr","report_pdf_base64":"..."} within 64 MiB.
	overhead := len(`{"service":"mvr","report_pdf_base64":""}`)
	size := ((64 << 20) - overhead) / 4 * 3
	s := newStack(t, stackOptions{})
	path, sum := largePDF(t, size)
	fileURL, key := s.liveReport(path)

	r := slowGet(t, fileURL, key, 1000*1000, 5*time.Minute)
	t.Logf("received %d of %d bytes in %s", r.n, size, r.took.Round(time.Millisecond))
	if r.status != 200 || r.contentLength != int64(size) || r.err != nil || r.n != int64(size) || r.sum != sum {
		t.Fatalf("status %d, Content-Length %d, body %d of %d bytes (read error %v), sha256 match %v",
			r.status, r.contentLength, r.n, size, r.err, r.sum == sum)
	}
}
