package testlog

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

// RefusedUnread sends each of heads (a request's head announcing a body of
// announced bytes, and at most its first few) on a connection of its own
// to addr, an in-process server's, and sends nothing more. Each
// connection must be answered within the given time, the server not
// waiting for the body, and want must accept the answer (it returns what
// is wrong with it, or ""); the heap must grow by less than a quarter of
// what was announced, the server setting no memory aside for the bodies.
// It returns what failed, one line a failure.
func RefusedUnread(t testing.TB, addr string, heads []string, announced int, within time.Duration, want func(*http.Response) string) []string {
	t.Helper()
	addr = strings.TrimPrefix(addr, "http://")
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	cs := make([]net.Conn, len(heads))
	for i, head := range heads {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cs[i] = c
		if _, err := c.Write([]byte(head)); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(within)
	var failures []string
	for i, c := range cs {
		_ = c.SetReadDeadline(deadline)
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			failures = append(failures, fmt.Sprintf("connection %d: no answer while the announced body was not sent: %v", i, err))
			continue
		}
		res.Body.Close()
		if bad := want(res); bad != "" {
			failures = append(failures, fmt.Sprintf("connection %d: %s", i, bad))
		}
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("heap grew %d KiB while %d connections announced %d bytes each", grew>>10, len(heads), announced)
	if grew > int64(len(heads))*int64(announced)/4 {
		failures = append(failures, fmt.Sprintf("heap grew %d MiB while %d connections announced %d bytes each: memory was set aside for bodies not sent",
			grew>>20, len(heads), announced))
	}
	return failures
}
