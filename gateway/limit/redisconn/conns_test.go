package redisconn

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"vendorgate/shared/testredis"
)

// TestConnsJudgeAtTheSocket: a request written to Redis and answered is
// not silence while its reply waits unread (the node is late, not Redis);
// a request written to a hung Redis is, once it has waited the timeout.
func TestConnsJudgeAtTheSocket(t *testing.T) {
	rs := testredis.Start(t)
	w := conns{clock: SystemClock{Epoch: time.Now()}}
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
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // past the 10ms judged, the reply arrived
	if w.silent(10 * time.Millisecond) {
		t.Fatal("silent with a reply waiting in the socket buffer")
	}
	buf := make([]byte, 64)
	if n, err := conn.Read(buf); err != nil || string(buf[:n]) != "+PONG\r\n" {
		t.Fatalf("read %q %v", buf[:n], err)
	}
	rs.Pause()
	defer rs.Resume()
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	if w.silent(10 * time.Millisecond) {
		t.Fatal("silent before the timeout passed")
	}
	time.Sleep(20 * time.Millisecond) // past the 10ms judged
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
