package testredis

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Cluster is a Redis Cluster of three masters, each a Server that can be
// stopped, paused and restarted.
type Cluster struct {
	Nodes  []*Server
	dir    string
	ownDir bool
}

// ClusterOptions says how RunCluster starts a cluster.
type ClusterOptions struct {
	// Dir holds one folder per node (its log and nodes.conf). Empty: a
	// temporary folder that Close removes.
	Dir string
	// NodeTimeout is cluster-node-timeout: how long a node may be
	// unreachable before the others mark it failed. Default 1s.
	NodeTimeout time.Duration
}

// RunCluster starts three redis-server processes in cluster mode on free
// ports (at most 55535: a node's bus port is its port plus 10000), joins
// them with redis-cli --cluster create, and waits for cluster_state:ok.
// Close stops them.
func RunCluster(o ClusterOptions) (*Cluster, error) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, ErrNotInstalled
	}
	if o.NodeTimeout <= 0 {
		o.NodeTimeout = time.Second
	}
	c := &Cluster{}
	if c.dir, c.ownDir, err = workDir(o.Dir, "testredis-cluster"); err != nil {
		return nil, err
	}
	for i := range 3 {
		dir := filepath.Join(c.dir, fmt.Sprintf("node-%d", i+1))
		s, err := run(Options{Dir: dir, Args: []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.FormatInt(o.NodeTimeout.Milliseconds(), 10)}}, 55535)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
	}
	args := append(append([]string{"--cluster", "create"}, c.Addrs()...), "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		c.Close()
		return nil, fmt.Errorf("redis-cli --cluster create: %w\n%s", err, out)
	}
	if err := c.waitOK(20 * time.Second); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// StartCluster is RunCluster for tests: an error fails the test, and the
// nodes stop when it ends.
func StartCluster(tb testing.TB) *Cluster {
	tb.Helper()
	c, err := RunCluster(ClusterOptions{Dir: tb.TempDir()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}

// Close stops every node and removes the folder RunCluster made.
func (c *Cluster) Close() {
	for _, n := range c.Nodes {
		n.Close()
	}
	if c.ownDir {
		_ = os.RemoveAll(c.dir)
	}
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

// waitOK waits until every running node reports cluster_state:ok.
func (c *Cluster) waitOK(bound time.Duration) error {
	deadline := time.Now().Add(bound)
	for time.Now().Before(deadline) {
		ok := true
		for _, n := range c.Nodes {
			if ping(n.Addr()) != nil {
				continue
			}
			info, err := n.Command("CLUSTER", "INFO")
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				ok = false
			}
		}
		if ok {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("cluster not ok within %s", bound)
}

// WaitOK waits until every running node reports cluster_state:ok, failing
// the test after 20s.
func (c *Cluster) WaitOK(tb testing.TB) {
	tb.Helper()
	if err := c.waitOK(20 * time.Second); err != nil {
		tb.Fatal(err)
	}
}

// Owner returns the node serving key's slot.
func (c *Cluster) Owner(key string) (*Server, error) {
	slot, err := c.Nodes[0].Command("CLUSTER", "KEYSLOT", key)
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(strings.TrimPrefix(slot, ":"))
	if err != nil {
		return nil, fmt.Errorf("CLUSTER KEYSLOT %s = %q", key, slot)
	}
	for _, s := range c.Nodes {
		owns, err := s.ownsSlot(n)
		if err != nil {
			return nil, err
		}
		if owns {
			return s, nil
		}
	}
	return nil, errors.New("no node owns slot " + strconv.Itoa(n))
}

// NodeFor is Owner for tests.
func (c *Cluster) NodeFor(tb testing.TB, key string) *Server {
	tb.Helper()
	s, err := c.Owner(key)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func (s *Server) ownsSlot(slot int) (bool, error) {
	nodes, err := s.cli("CLUSTER", "NODES")
	if err != nil {
		return false, err
	}
	// CLUSTER NODES' "myself" line lists the node's slot ranges.
	for _, line := range strings.Split(nodes, "\n") {
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
				return true, nil
			}
		}
	}
	return false, nil
}
