package testpg

import (
	"net"
	"strconv"
	"testing"
	"time"
)

func TestStart(t *testing.T) {
	s := Start(t)
	url := s.CreateDB(t, "probe")
	if url == "" {
		t.Fatal("no URL")
	}
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(s.Port), time.Second)
	if err != nil {
		t.Fatalf("server not listening: %v", err)
	}
	c.Close()
	s.Stop()
	if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(s.Port), 200*time.Millisecond); err == nil {
		c.Close()
		t.Fatal("server still listening after Stop")
	}
}
