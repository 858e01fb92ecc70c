package testpg

import (
	"net"
	"os"
	"strconv"
	"strings"
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
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(s.Port), 200*time.Millisecond); err == nil {
		c.Close()
		t.Fatal("server still listening after Stop")
	}
}

// TestRunRestartClose is the core the load tools use: no testing.TB, a
// restart that keeps the data and the port, and a Close that removes it all.
func TestRunRestartClose(t *testing.T) {
	s, err := Run(Options{})
	if err == ErrNotInstalled {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.CreateDatabase("kept"); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateDatabase("kept"); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("after Restart the database is gone: %v", err)
	}
	if !strings.Contains(s.Version(), "PostgreSQL") {
		t.Errorf("Version() = %q", s.Version())
	}
	s.Close()
	if _, err := os.Stat(s.base); !os.IsNotExist(err) {
		t.Fatalf("Close left %s: %v", s.base, err)
	}
}
