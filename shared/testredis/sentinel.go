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

// StartSentinel starts a Redis Sentinel on a free port that monitors master
// under the name name (quorum 1), and waits until it knows the master.
func StartSentinel(tb testing.TB, master *Server, name string) *Server {
	tb.Helper()
	s := &Server{Port: FreePort(tb), dir: tb.TempDir(), bin: master.bin}
	conf := filepath.Join(s.dir, "sentinel.conf")
	body := fmt.Sprintf("port %d\nbind 127.0.0.1\nprotected-mode no\ndir %s\nsentinel monitor %s 127.0.0.1 %d 1\n"+
		"sentinel down-after-milliseconds %s 1000\n", s.Port, s.dir, name, master.Port, name)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		tb.Fatal(err)
	}
	s.args = []string{conf, "--sentinel"}
	if err := s.start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Stop)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if strings.Contains(s.bulk(tb, "SENTINEL", "get-master-addr-by-name", name), strconv.Itoa(master.Port)) {
			return s
		}
		time.Sleep(50 * time.Millisecond)
	}
	tb.Fatalf("sentinel does not know master %s within 10s", name)
	return nil
}
