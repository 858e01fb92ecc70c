// Package testlog helps tests read what a server logs and send it raw
// requests: a log sink safe for the server's goroutines (Buffer), and
// clients that write bytes no HTTP client would (SendRaw; RefusedUnread, in
// body.go, announces bodies it never sends).
package testlog

import (
	"bytes"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// Buffer is a log sink safe for concurrent writers and a reading test.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// WaitFor waits up to five seconds until done holds for what was logged,
// and returns the log then (whether or not done held).
func (l *Buffer) WaitFor(done func(log string) bool) string {
	deadline := time.Now().Add(5 * time.Second)
	for !done(l.String()) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	return l.String()
}

// SendRaw writes each of raws on a connection of its own to addr (host:port,
// or a URL with an http:// prefix) and reads until the server closes it.
func SendRaw(t testing.TB, addr string, raws ...string) {
	t.Helper()
	for _, raw := range raws {
		c, err := net.Dial("tcp", strings.TrimPrefix(addr, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.WriteString(c, raw)
		_, _ = io.ReadAll(c) // the server answers 400 and closes
		c.Close()
	}
}
