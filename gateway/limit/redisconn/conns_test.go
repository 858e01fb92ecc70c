//go:build unix

package redisconn

import (
	"context"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"vendorgate/shared/testredis"
)

// TestConnsJudgeAtTheSocket: a request written to Redis and answered is
// not silence while its reply waits unread (the node is late, not Redis);
// a request written to a hung Redis is, once it has waited the timeout.
// The judge's clock is stepped by the test (the time a request has
// waited is the clock's, not the socket's); the sockets are real (what is
// judged is what waits in one). (Unix: elsewhere no socket is peeked.)
func TestConnsJudgeAtTheSocket(t *testing.T) {
	rs := testredis.Start(t)
	clk := &stepClock{}
	clk.ns.Store(int64(time.Second))
	w := conns{clock: clk}
	c := redis.NewClient(&redis.Options{Addr: rs.Addr(), MaxRetries: -1, PoolSize: 1})
	t.Cleanup(func() { c.Close() })
	w.watch(c)
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if w.silent(0) {
		t.Fatal("silent after an answered PING")
	}
	w.mu.Lock()
	var conn *watchedConn
	for wc := range w.set {
		conn = wc
	}
	w.mu.Unlock()
	if conn == nil {
		t.Fatal("the dialled connection is not watched")
	}
	// A PING written through the watched connection; its +PONG is left
	// unread, as by a sender that got no core.
	clk.step(time.Millisecond)
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	waitReadable(t, conn)
	clk.step(20 * time.Millisecond) // past the 10ms judged
	if w.silent(10 * time.Millisecond) {
		t.Fatal("silent with a reply waiting in the socket buffer")
	}
	buf := make([]byte, 64)
	if n, err := conn.Read(buf); err != nil || string(buf[:n]) != "+PONG\r\n" {
		t.Fatalf("read %q %v", buf[:n], err)
	}
	rs.Pause()
	defer rs.Resume()
	clk.step(time.Millisecond)
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	if w.silent(10 * time.Millisecond) {
		t.Fatal("silent before the timeout passed")
	}
	clk.step(20 * time.Millisecond) // past the 10ms judged
	if !w.silent(10 * time.Millisecond) {
		t.Fatal("a hung Redis not seen silent")
	}
	rs.Resume()
	if n, err := conn.Read(buf); err != nil || string(buf[:n]) != "+PONG\r\n" {
		t.Fatalf("read %q %v", buf[:n], err)
	}
	conn.Close()
	w.mu.Lock()
	left := len(w.set)
	w.mu.Unlock()
	if left != 0 {
		t.Fatal("a closed connection still watched")
	}
}

// stepClock is a Clock that moves only when stepped (no timers).
type stepClock struct{ ns atomic.Int64 }

func (c *stepClock) Nanotime() int64      { return c.ns.Load() }
func (c *stepClock) NewTimer() Timer      { panic("stepClock has no timers") }
func (c *stepClock) step(d time.Duration) { c.ns.Add(int64(d)) }

// waitReadable waits until bytes wait in conn's socket, without reading
// them: the netpoller wakes it when the socket turns readable.
func waitReadable(t *testing.T, conn *watchedConn) {
	t.Helper()
	raw, err := conn.Conn.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var buf [1]byte
	err = raw.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return n > 0 || err != syscall.EAGAIN // false: wait for the socket to turn readable
	})
	if err != nil {
		t.Fatal(err)
	}
}
