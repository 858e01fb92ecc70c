package testredis

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// RunSentinel starts a Redis Sentinel on a free port that monitors master
// under the name name (quorum 1), and waits until it knows the master. Its
// sentinel.conf goes in o.Dir (empty: a temporary folder); o.Args is
// ignored. Close stops it.
func RunSentinel(master *Server, name string, o Options) (*Server, error) {
	port, err := FindPort(65535)
	if err != nil {
		return nil, err
	}
	s := &Server{Port: port, bin: master.bin}
	if s.dir, s.ownDir, err = workDir(o.Dir, "testredis-sentinel"); err != nil {
		return nil, err
	}
	conf := filepath.Join(s.dir, "sentinel.conf")
	body := fmt.Sprintf("port %d\nbind 127.0.0.1\nprotected-mode no\ndir %s\nsentinel monitor %s 127.0.0.1 %d 1\n"+
		"sentinel down-after-milliseconds %s 1000\n", s.Port, s.dir, name, master.Port, name)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		s.Close()
		return nil, err
	}
	s.args = []string{conf, "--sentinel"}
	if err := s.start(); err != nil {
		s.Close()
		return nil, err
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if out, err := s.cli("SENTINEL", "get-master-addr-by-name", name); err == nil && strings.Contains(out, strconv.Itoa(master.Port)) {
			return s, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.Close()
	return nil, fmt.Errorf("sentinel does not know master %s within 10s", name)
}

// StartSentinel is RunSentinel for tests: an error fails the test, and the
// sentinel stops when it ends.
func StartSentinel(tb testing.TB, master *Server, name string) *Server {
	tb.Helper()
	s, err := RunSentinel(master, name, Options{Dir: tb.TempDir()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}
