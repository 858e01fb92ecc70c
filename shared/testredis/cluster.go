package testredis

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Cluster is a Redis Cluster of three masters, each a Server the test can
// stop, pause and restart.
type Cluster struct {
	Nodes []*Server
}

// StartCluster starts three redis-server processes in cluster mode on free
// ports (at most 55535: a node's bus port is its port plus 10000), joins
// them with redis-cli --cluster create, and waits for cluster_state:ok.
func StartCluster(tb testing.TB) *Cluster {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatalf("redis-server not found: install it (apt-get install -y redis-server) or run .ci/run")
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		tb.Fatalf("redis-cli not found: install it (apt-get install -y redis-tools) or run .ci/run")
	}
	c := &Cluster{}
	for i := 0; i < 3; i++ {
		s := &Server{Port: clusterPort(tb), dir: tb.TempDir(), bin: bin}
		s.args = []string{"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1", "--save", "",
			"--appendonly", "no", "--dir", s.dir, "--protected-mode", "no",
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000"}
		if err := s.start(); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(s.Stop)
		c.Nodes = append(c.Nodes, s)
	}
	args := []string{"--cluster", "create"}
	for _, n := range c.Nodes {
		args = append(args, n.Addr())
	}
	args = append(args, "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		tb.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	c.WaitOK(tb)
	return c
}

// Addrs lists the nodes' host:port.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr()
	}
	return out
}

// URLs lists the nodes as redis:// URLs.
func (c *Cluster) URLs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = "redis://" + n.Addr()
	}
	return out
}

// WaitOK waits until every running node reports cluster_state:ok.
func (c *Cluster) WaitOK(tb testing.TB) {
	tb.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		ok := true
		for _, n := range c.Nodes {
			if ping(n.Addr()) != nil {
				continue
			}
			if !strings.Contains(n.Do(tb, "CLUSTER", "INFO"), "cluster_state:ok") {
				ok = false
			}
		}
		if ok {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	tb.Fatalf("cluster not ok within 20s")
}

// NodeFor returns the node serving key's slot.
func (c *Cluster) NodeFor(tb testing.TB, key string) *Server {
	tb.Helper()
	slot := c.Nodes[0].Do(tb, "CLUSTER", "KEYSLOT", key)
	n, err := strconv.Atoi(strings.TrimPrefix(slot, ":"))
	if err != nil {
		tb.Fatalf("CLUSTER KEYSLOT %s = %q", key, slot)
	}
	for _, s := range c.Nodes {
		if s.ownsSlot(tb, n) {
			return s
		}
	}
	tb.Fatalf("no node owns slot %d", n)
	return nil
}

func (s *Server) ownsSlot(tb testing.TB, slot int) bool {
	// CLUSTER NODES' "myself" line lists the node's slot ranges.
	for _, line := range strings.Split(s.bulk(tb, "CLUSTER", "NODES"), "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || !strings.Contains(f[2], "myself") {
			continue
		}
		for _, r := range f[8:] {
			lo, hi, _ := strings.Cut(r, "-")
			a, err1 := strconv.Atoi(lo)
			b := a
			var err2 error
			if hi != "" {
				b, err2 = strconv.Atoi(hi)
			}
			if err1 == nil && err2 == nil && slot >= a && slot <= b {
				return true
			}
		}
	}
	return false
}

func (s *Server) bulk(tb testing.TB, args ...string) string {
	tb.Helper()
	out, err := exec.Command("redis-cli", append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(s.Port)}, args...)...).Output()
	if err != nil {
		tb.Fatalf("redis-cli %v: %v", args, err)
	}
	return string(out)
}

func clusterPort(tb testing.TB) int {
	for i := 0; i < 100; i++ {
		if p := FreePort(tb); p <= 55535 {
			return p
		}
	}
	tb.Fatal(fmt.Errorf("no free port at or below 55535"))
	return 0
}
