package idleconn

import (
	"bytes"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// pair returns a server-side Conn with o and the client's raw end, whose
// receive buffer is small so that a stalled client blocks the server soon.
func pair(t *testing.T, o Options) (*Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) {
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 16<<10)
		})
	}}
	client, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err := NewListener(ln, o).Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return server.(*Conn), client
}

// result runs fn and returns its error, failing the test if it blocks past
// limit (a write nobody bounds would block forever).
func result(t *testing.T, limit time.Duration, fn func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		t.Fatalf("still blocked after %s", limit)
		return nil
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestStalledPeerIsCut(t *testing.T) {
	body := make([]byte, 16<<20)
	for name, write := range map[string]func(c *Conn) error{
		"Write":    func(c *Conn) error { _, err := c.Write(body); return err },
		"ReadFrom": func(c *Conn) error { _, err := c.ReadFrom(bytes.NewReader(body)); return err },
	} {
		t.Run(name, func(t *testing.T) {
			server, _ := pair(t, Options{Idle: 300 * time.Millisecond})
			if err := result(t, 10*time.Second, func() error { return write(server) }); !isTimeout(err) {
				t.Fatalf("write to a peer that reads nothing: %v; want a timeout", err)
			}
		})
	}
}

func TestCallerDeadlineStands(t *testing.T) {
	server, client := pair(t, Options{Idle: 100 * time.Millisecond})
	if err := server.SetWriteDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	const size = 4 << 20
	go func() {
		time.Sleep(500 * time.Millisecond) // five times Idle without reading
		_, _ = io.Copy(io.Discard, client)
	}()
	err := result(t, 10*time.Second, func() error {
		_, err := server.Write(make([]byte, size))
		return err
	})
	if err != nil {
		t.Fatalf("write under the caller's deadline: %v", err)
	}
}

func TestSteadyReaderIsNotCut(t *testing.T) {
	server, client := pair(t, Options{Idle: 300 * time.Millisecond})
	if err := server.Conn.(*net.TCPConn).SetWriteBuffer(16 << 10); err != nil {
		t.Fatal(err)
	}
	const size = 512 << 10 // 32 KiB per 100ms: over a second, several times Idle
	go func() {
		buf := make([]byte, 64<<10)
		for {
			if _, err := client.Read(buf); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	err := result(t, 30*time.Second, func() error {
		n, err := server.ReadFrom(io.LimitReader(bytes.NewReader(make([]byte, size)), size))
		if err == nil && n != size {
			err = io.ErrShortWrite
		}
		return err
	})
	if err != nil {
		t.Fatalf("slow but steady reader: %v", err)
	}
}

func TestFirstByteBoundsTheAnswer(t *testing.T) {
	server, client := pair(t, Options{Idle: 10 * time.Second, FirstByte: 200 * time.Millisecond})
	if _, err := server.Write([]byte("request")); err != nil {
		t.Fatal(err)
	}
	_ = client // never answers
	err := result(t, 5*time.Second, func() error { _, err := server.Read(make([]byte, 1)); return err })
	if !isTimeout(err) {
		t.Fatalf("read waiting for an answer: %v; want a timeout after FirstByte", err)
	}
}
