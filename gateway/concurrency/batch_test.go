package concurrency

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"vendorgate/config"
	"vendorgate/gateway/limit/redisconn"
	"vendorgate/shared/testredis"
)

// More slots held than one script call names (releaseBatch): a refresh
// is several calls, and what each answers is its own requests'. Three sets
// of 300 members; one set is lost (DEL): the next refresh puts back its 300
// members, told as 300 lost, and the sets that kept theirs are told of
// none. The 900 releases, batched, empty the three sets.
func TestManySlotsRefreshAndRelease(t *testing.T) {
	srv := testredis.Start(t)
	var mu sync.Mutex
	lost := 0
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	l, err := NewRedis(Options{Client: c, Conn: transport(t, srv.Addr(), 2*time.Second), TTL: 10 * time.Second, Refresh: 200 * time.Millisecond, Timeout: 2 * time.Second,
		OnLost: func(n int) { mu.Lock(); lost += n; mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	sets := []string{"vg:{v:v1}:a:slots", "vg:{v:v1}:b:slots", "vg:{v:v1}:c:slots"}
	const each = 300
	var held []*Held
	for i := 0; i < each; i++ {
		for _, set := range sets {
			h, refused, err := l.Acquire(slots(each, set))
			if err != nil || refused != -1 {
				t.Fatalf("slot %d of %s: refused %d, %v", i, set, refused, err)
			}
			held = append(held, h)
		}
	}
	srv.Do(t, "DEL", sets[1])
	waitCount(t, srv, sets[1], each)
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := lost
		mu.Unlock()
		if n == each {
			break
		}
		if n > each || time.Now().After(deadline) {
			t.Fatalf("OnLost told of %d slots, want the %d of the set deleted", n, each)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, set := range sets {
		if _, refused, err := l.Acquire(slots(each, set)); err != nil || refused != 0 {
			t.Fatalf("%s at its cap: refused %d, %v; want refused", set, refused, err)
		}
	}
	for _, h := range held {
		h.Release()
	}
	for _, set := range sets {
		waitCount(t, srv, set, 0)
	}
}

// Redis lost its scripts (SCRIPT FLUSH; a restart is the same): the next
// release, sent by the script's digest, meets NOSCRIPT and is sent again
// whole, and the slots are free.
func TestReleaseAfterScriptFlush(t *testing.T) {
	srv := testredis.Start(t)
	l := newRedis(t, srv.Addr(), 10*time.Second, 5*time.Second)
	const key = "vg:{v:v1}:reports:slots"
	first, refused, err := l.Acquire(slots(2, key))
	if err != nil || refused != -1 {
		t.Fatalf("first slot: refused %d, %v", refused, err)
	}
	first.Release() // the release script loaded
	waitCount(t, srv, key, 0)
	held := holdTwo(t, l, key)
	srv.Do(t, "SCRIPT", "FLUSH")
	for _, h := range held {
		h.Release()
	}
	waitCount(t, srv, key, 0)
}

// On a Redis Cluster, one release or refresh names only requests whose sets
// share a hash slot (a script's keys must): 40 vendors' slots, on every
// master, are refreshed back after their sets are deleted and given back
// after, in batches that span the nodes.
func TestSlotsOnCluster(t *testing.T) {
	cl := testredis.StartCluster(t)
	cl.WaitOK(t)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	var mu sync.Mutex
	var errs []error
	lost := 0
	l, err := NewRedis(Options{Client: client, Conn: clusterTransport(t, cl.Addrs()), TTL: 10 * time.Second, Refresh: 200 * time.Millisecond, Timeout: 2 * time.Second,
		OnError: func(what string, err error) {
			mu.Lock()
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
			mu.Unlock()
		},
		OnLost: func(n int) { mu.Lock(); lost += n; mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	const vendors = 40
	nodes := map[*testredis.Server]bool{}
	var held []*Held
	for v := 0; v < vendors; v++ {
		set := fmt.Sprintf("vg:{v:%d}:reports:slots", v)
		nodes[cl.NodeFor(t, set)] = true
		var ss Slots
		ss.Add(Slot{Key: set, Cap: 2})
		ss.Add(Slot{Key: set + ":k", Cap: 2})
		h, refused, err := l.Acquire(&ss)
		if err != nil || refused != -1 {
			t.Fatalf("vendor %d: refused %d, %v", v, refused, err)
		}
		held = append(held, h)
	}
	if len(nodes) < 2 {
		t.Fatalf("the vendors' sets are on %d master, want several", len(nodes))
	}
	ctx := context.Background()
	for v := 0; v < vendors; v++ {
		set := fmt.Sprintf("vg:{v:%d}:reports:slots", v)
		if err := client.Del(ctx, set, set+":k").Err(); err != nil {
			t.Fatal(err)
		}
	}
	count := func() int64 {
		var n int64
		for v := 0; v < vendors; v++ {
			set := fmt.Sprintf("vg:{v:%d}:reports:slots", v)
			n += client.ZCard(ctx, set).Val() + client.ZCard(ctx, set+":k").Val()
		}
		return n
	}
	waitFor(t, "the refresh puts every slot back", func() bool { return count() == 2*vendors })
	mu.Lock()
	if lost != vendors {
		t.Errorf("OnLost told of %d requests' slots, want %d", lost, vendors)
	}
	mu.Unlock()
	for _, h := range held {
		h.Release()
	}
	waitFor(t, "the releases empty every set", func() bool { return count() == 0 })
	mu.Lock()
	defer mu.Unlock()
	if len(errs) > 0 {
		t.Fatalf("the releases and refreshes failed: %v", errs)
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 5 s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// clusterTransport is the limiter's transport to a Redis Cluster.
func clusterTransport(t *testing.T, addrs []string) *redisconn.Conn {
	t.Helper()
	wire := max(config.DefaultGateway().Redis.WireTimeout, 2*time.Second)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRetries: -1, ContextTimeoutEnabled: true,
		ReadTimeout: wire, WriteTimeout: wire})
	t.Cleanup(func() { _ = c.Close() })
	conn, err := transportOn(c, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	return conn
}
