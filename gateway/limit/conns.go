package limit

import (
	"context"
	"net"
	"sync"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// conns watches the limiter client's connections, so that a caller about
// to call Redis silent can look whether a reply is already waiting in one
// of their socket buffers: Redis answered, and only the gateway (a sender
// not yet scheduled, the runtime not yet polling the network) is late. It
// is a go-redis hook that keeps each dialled connection's raw handle; a
// look peeks (never reads) and forgets the connections that were closed.
// Connections that give no raw handle (TLS) are not watched: they leave the
// verdict to the timing evidence alone.
type conns struct {
	mu  sync.Mutex
	raw map[syscall.RawConn]struct{}
}

// watch adds c as a hook to the client, or to every node of a Cluster.
// It must be called before the client dials.
func (c *conns) watch(client redis.UniversalClient) {
	c.raw = make(map[syscall.RawConn]struct{})
	switch cl := client.(type) {
	case *redis.ClusterClient:
		cl.OnNewNode(func(n *redis.Client) { n.AddHook(c) })
	case *redis.Client:
		cl.AddHook(c)
	}
}

// DialHook records each new connection's raw handle.
func (c *conns) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			return conn, err
		}
		if sc, ok := conn.(syscall.Conn); ok {
			if raw, err := sc.SyscallConn(); err == nil {
				c.mu.Lock()
				c.raw[raw] = struct{}{}
				c.mu.Unlock()
			}
		}
		return conn, nil
	}
}

// ProcessHook leaves commands as they are.
func (c *conns) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

// ProcessPipelineHook leaves pipelines as they are.
func (c *conns) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// replyWaiting reports whether any watched connection has bytes waiting to
// be read.
func (c *conns) replyWaiting() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for raw := range c.raw {
		waiting, open := peek(raw)
		if !open {
			delete(c.raw, raw)
			continue
		}
		if waiting {
			return true
		}
	}
	return false
}
