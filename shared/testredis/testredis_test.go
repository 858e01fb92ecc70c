package testredis

import (
	"net"
	"strings"
	"testing"
	"time"
)

func TestLifecycle(t *testing.T) {
	s := Start(t)
	if s.Port == 6379 {
		t.Fatal("must never use the standard port")
	}
	if got := s.Do(t, "SET", "k", "v"); got != "+OK" {
		t.Fatalf("SET = %q", got)
	}
	if got := s.Do(t, "GET", "k"); got != "v" {
		t.Fatalf("GET = %q", got)
	}
	if !strings.Contains(s.Do(t, "INFO", "server"), "redis_version") {
		t.Fatal("INFO did not answer")
	}

	s.Pause()
	if err := ping(s.Addr()); err == nil {
		t.Fatal("a paused server answered PING")
	}
	s.Resume()
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("resumed server: %v", err)
	}

	s.Stop()
	if c, err := net.DialTimeout("tcp", s.Addr(), 100*time.Millisecond); err == nil {
		c.Close()
		t.Fatal("a stopped server still accepts connections")
	}
	s.Restart(t)
	if got := s.Do(t, "GET", "k"); got != "" {
		t.Fatalf("restarted server kept data: %q", got)
	}
}
