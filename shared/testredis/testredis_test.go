package testredis

import (
	"net"
	"os"
	"strconv"
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

func TestCluster(t *testing.T) {
	c := StartCluster(t)
	if len(c.Nodes) != 3 {
		t.Fatalf("%d nodes", len(c.Nodes))
	}
	for _, n := range c.Nodes {
		if n.Port > 55535 {
			t.Fatalf("port %d too high for a cluster bus", n.Port)
		}
	}
	owner := c.NodeFor(t, "{v:abc}:reads")
	if got := owner.Do(t, "SET", "{v:abc}:reads", "1"); got != "+OK" {
		t.Fatalf("SET on the slot's owner = %q", got)
	}
	for _, n := range c.Nodes {
		if n != owner && !strings.HasPrefix(n.Do(t, "SET", "{v:abc}:reads", "1"), "-MOVED") {
			t.Fatalf("a node that does not own the slot accepted the write")
		}
	}
}

func TestSentinel(t *testing.T) {
	m := Start(t)
	s := StartSentinel(t, m, "vgmaster")
	if got, err := s.cli("SENTINEL", "get-master-addr-by-name", "vgmaster"); err != nil || !strings.Contains(got, strconv.Itoa(m.Port)) {
		t.Fatalf("sentinel names %q (%v), want port %d", got, err, m.Port)
	}
}

// TestRunWithoutTest is the core the load tools use: no testing.TB, a
// temporary folder of its own that Close removes, the pid for CPU figures.
func TestRunWithoutTest(t *testing.T) {
	s, err := Run(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Pid() <= 0 {
		t.Fatalf("pid %d", s.Pid())
	}
	info, err := s.Command("INFO", "server")
	if err != nil || !strings.Contains(info, "redis_version") {
		t.Fatalf("INFO = %q, %v", info, err)
	}
	s.Close()
	if s.Pid() != 0 {
		t.Fatal("a closed server reports a pid")
	}
	if _, err := os.Stat(s.dir); !os.IsNotExist(err) {
		t.Fatalf("Close left the folder %s: %v", s.dir, err)
	}
	if _, err := s.Command("PING"); err == nil {
		t.Fatal("a closed server answered")
	}
}

// A server that exits at start fails Run with its own words, not with a
// wait for PING that runs out.
func TestRunReportsAnEarlyExit(t *testing.T) {
	_, err := Run(Options{Dir: t.TempDir(), Args: []string{"--no-such-option", "x"}})
	if err == nil || !strings.Contains(err.Error(), "exited at start") {
		t.Fatalf("err = %v", err)
	}
}

// TestHoleStopsForwarding: the hole forwards both ways until Hold, then
// forwards nothing while keeping the connection open; Close closes it.
func TestHoleStopsForwarding(t *testing.T) {
	s := Start(t)
	h, err := StartHole(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	c, err := net.Dial("tcp", h.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 64)
	ping := func() (string, error) {
		if _, err := c.Write([]byte("PING\r\n")); err != nil {
			return "", err
		}
		n, err := c.Read(buf)
		return string(buf[:n]), err
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if got, err := ping(); err != nil || got != "+PONG\r\n" {
		t.Fatalf("before Hold: %q %v", got, err)
	}
	h.Hold()
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if got, err := ping(); !os.IsTimeout(err) {
		t.Fatalf("after Hold: %q %v; want the write taken and the read timed out", got, err)
	}
	h.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(buf); err == nil {
		t.Fatalf("after Close: read %q; want the connection closed", buf[:n])
	}
}

// TestInfo: INFO read by name, from a real Redis: its CPU seconds, a
// script call counted, and the sums of fields.
func TestInfo(t *testing.T) {
	s := Start(t)
	before := s.Info(t, "cpu", "commandstats")
	s.Do(t, "EVAL", "return 1", "0")
	after := s.Info(t, "cpu", "commandstats", "memory")
	if after.Scripts() != before.Scripts()+1 || after.Calls()["eval"] != before.Calls()["eval"]+1 {
		t.Fatalf("scripts %d then %d, eval calls %v then %v; want one more", before.Scripts(), after.Scripts(), before.Calls(), after.Calls())
	}
	if after.CPU() <= 0 || after.CPU() < before.CPU() {
		t.Fatalf("CPU %v then %v", before.CPU(), after.CPU())
	}
	if m, ok := after.Sum("used_memory"); !ok || m <= 0 {
		t.Fatalf("used_memory %v %v", m, ok)
	}
	if _, ok := after.Sum("no_such_field"); ok {
		t.Fatal("a field not in the reply was found")
	}
	i := ParseInfo("# Commandstats\r\ncmdstat_evalsha:calls=10,usec=30,usec_per_call=3.00\r\ncmdstat_eval:calls=2,usec=1\r\n")
	if i.Scripts() != 12 || len(i.Calls()) != 2 {
		t.Fatalf("%v: scripts %d", i.Calls(), i.Scripts())
	}
}

// TestFindPortNeverTwice: ports handed out in one process are all
// different, even though each was closed again. Linux gives a port just
// closed to the next bind to port 0 often (571 of 3,000 binds in a row
// here): the e2e stacks, which pick their processes' ports side by side
// in one test process, gave a gateway the port their backend had bound.
func TestFindPortNeverTwice(t *testing.T) {
	seen := map[int]bool{}
	for range 3000 {
		p := FreePort(t)
		if seen[p] {
			t.Fatalf("port %d handed out twice (after %d others)", p, len(seen))
		}
		seen[p] = true
	}
}
