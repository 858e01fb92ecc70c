package concurrency

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"vendorgate/config"
	"vendorgate/gateway/limit/redisconn"
	"vendorgate/shared/testredis"
)

// newRedis is a limiter on its own client, as each gateway has one.
func newRedis(t testing.TB, addr string, ttl, refresh time.Duration) *Redis {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	r, err := NewRedis(Options{Client: c, Conn: transport(t, addr, 2*time.Second), TTL: ttl, Refresh: refresh, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

func slots(cap int, keys ...string) *Slots {
	var ss Slots
	for _, k := range keys {
		ss.Add(Slot{Key: k, Cap: cap})
	}
	return &ss
}

// waitFree waits until key has fewer than cap members that have not
// expired (the releaser gives slots back a moment after Release).
func waitCount(t *testing.T, srv *testredis.Server, key string, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, _ := strconv.Atoi(strings.TrimPrefix(srv.Do(t, "ZCARD", key), ":"))
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s holds %d slots, want %d", key, n, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A cap holds over two gateways' limiters: four slots taken on either, the
// fifth refused on both; a slot given back on one is taken on the other.
// Several sets are all or nothing: a request refused by one takes no slot
// of the others.
func TestCapHoldsAcrossGateways(t *testing.T) {
	srv := testredis.Start(t)
	a, b := newRedis(t, srv.Addr(), 10*time.Second, time.Second), newRedis(t, srv.Addr(), 10*time.Second, time.Second)
	const key = "vg:{v:v1}:downloads:slots"
	var held []*Held
	for i := 0; i < 4; i++ {
		l := []*Redis{a, b}[i%2]
		h, refused, err := l.Acquire(slots(4, key))
		if err != nil || refused != -1 || h == nil {
			t.Fatalf("slot %d: %v, refused %d", i, err, refused)
		}
		held = append(held, h)
	}
	for _, l := range []*Redis{a, b} {
		if h, refused, err := l.Acquire(slots(4, key)); err != nil || refused != 0 || h != nil {
			t.Fatalf("fifth slot: %v, refused %d, held %v", err, refused, h)
		}
	}
	held[0].Release()
	held[0].Release() // once only
	waitCount(t, srv, key, 3)
	h, refused, err := b.Acquire(slots(4, key))
	if err != nil || refused != -1 {
		t.Fatalf("after a release: %v, refused %d", err, refused)
	}
	held[0] = h

	// Two sets: the second at its cap refuses, and the first keeps its count.
	var ss Slots
	ss.Add(Slot{Key: "vg:{v:v1}:other:slots", Cap: 9})
	ss.Add(Slot{Key: key, Cap: 4})
	if h, refused, err := a.Acquire(&ss); err != nil || refused != 1 || h != nil {
		t.Fatalf("two sets, the second full: %v, refused %d", err, refused)
	}
	waitCount(t, srv, "vg:{v:v1}:other:slots", 0)
	for _, h := range held {
		h.Release()
	}
	waitCount(t, srv, key, 0)
	if a.Held()+b.Held() != 0 {
		t.Fatalf("%d slots still held after every release", a.Held()+b.Held())
	}
}

// Then is released with the slots: a request's slot at its gateway and
// its concurrency slots are one value held until the answer is done.
func TestReleaseReleasesThen(t *testing.T) {
	l := NewLocal()
	h, refused, err := l.Acquire(slots(1, "k"))
	if err != nil || refused != -1 {
		t.Fatal(err, refused)
	}
	n := 0
	h.Then = releaseFunc(func() { n++ })
	if _, refused, _ := l.Acquire(slots(1, "k")); refused != 0 {
		t.Fatal("in process: the second of a cap of 1 was not refused")
	}
	h.Release()
	h.Release()
	if n != 1 {
		t.Fatalf("Then released %d times, want once", n)
	}
	if _, refused, _ := l.Acquire(slots(1, "k")); refused != -1 {
		t.Fatal("in process: the slot given back was not free")
	}
}

type releaseFunc func()

func (f releaseFunc) Release() { f() }

// Redis down: the slots cannot be counted, an error (the gateway answers
// 503 rate_limit_unavailable), and nothing is held.
func TestRedisDownIsAnError(t *testing.T) {
	srv := testredis.Start(t)
	l := newRedis(t, srv.Addr(), 10*time.Second, time.Second)
	srv.Stop()
	if h, _, err := l.Acquire(slots(4, "vg:{v:v1}:d:slots")); err == nil || h != nil {
		t.Fatalf("Redis stopped: held %v, err %v; want an error", h, err)
	}
	if l.Held() != 0 {
		t.Fatalf("%d held after a failed call", l.Held())
	}
}

// helperEnv makes the test binary the helper process of
// TestKilledGatewaysSlotsComeBack: it takes two slots and holds them,
// refreshing, until it is killed.
const helperEnv = "CONCURRENCY_TEST_HOLDER"

func TestMain(m *testing.M) {
	if addr := os.Getenv(helperEnv); addr != "" {
		os.Exit(holder(addr))
	}
	os.Exit(m.Run())
}

func holder(addr string) int {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	conn, err := newTransport(addr, 2*time.Second)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	r, err := NewRedis(Options{Client: c, Conn: conn, TTL: killTTL, Refresh: killTTL / 4, Timeout: 2 * time.Second})
	if err != nil {
		fmt.Println(err)
		return 1
	}
	for i := 0; i < 2; i++ {
		if _, refused, err := r.Acquire(slots(2, killKey)); err != nil || refused != -1 {
			fmt.Println("not held:", err, refused)
			return 1
		}
	}
	fmt.Println("held")
	select {}
}

const (
	killTTL = 2 * time.Second
	killKey = "vg:{v:v1}:reports:slots"
)

// TestKilledGatewaysSlotsComeBack: a process holding slots (the limiter a
// gateway runs) keeps them past their TTL by refreshing them, and once it
// is killed with SIGKILL (no release, no goodbye) its slots are free again
// within the TTL after its last refresh: here within killTTL of the kill
// and never before killTTL/4 (the refresh period) short of it.
func TestKilledGatewaysSlotsComeBack(t *testing.T) {
	srv := testredis.Start(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+srv.Addr())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "held" {
		t.Fatalf("holder: %q", line)
	}
	l := newRedis(t, srv.Addr(), killTTL, killTTL/4)
	// Past two TTLs the live holder's refreshes keep its slots.
	time.Sleep(2 * killTTL)
	if _, refused, err := l.Acquire(slots(2, killKey)); err != nil || refused != 0 {
		t.Fatalf("a live holder's slots after 2 TTLs: refused %d, %v; want refused", refused, err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	for {
		h, refused, err := l.Acquire(slots(2, killKey))
		if err != nil {
			t.Fatal(err)
		}
		if refused == -1 {
			h.Release()
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	took := time.Since(killed)
	t.Logf("the killed holder's slots were free %s after SIGKILL (slot TTL %s, refresh %s)", took.Round(time.Millisecond), killTTL, killTTL/4)
	// The bound: the TTL after the last refresh, which came before the
	// kill; 500 ms for this loop's own steps on a loaded machine.
	if took > killTTL+500*time.Millisecond {
		t.Fatalf("slots free %s after the kill; the bound is the slot TTL, %s", took, killTTL)
	}
}

// transport is the rate limiter's transport to the Redis at addr, as the
// gateway passes it to this limiter: on the limiter's client (not the
// slots' own), pipelined, timeout a caller's wait on a silent Redis,
// config's defaults otherwise; closed when the test ends.
func transport(t testing.TB, addr string, timeout time.Duration) *redisconn.Conn {
	t.Helper()
	conn, err := newTransport(addr, timeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	return conn
}

// newTransport is transport for a helper process (no test to end it).
func newTransport(addr string, timeout time.Duration) (*redisconn.Conn, error) {
	wire := max(config.DefaultGateway().Redis.WireTimeout, timeout)
	return transportOn(redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true,
		ReadTimeout: wire, WriteTimeout: wire}), timeout)
}

// transportOn is the limiter's transport on c, a client of its own, with
// the shipped settings and timeout.
func transportOn(c redis.UniversalClient, timeout time.Duration) (*redisconn.Conn, error) {
	d := config.DefaultGateway().Redis
	h, err := redisconn.NewHealth(redisconn.HealthOptions{BreakerOpenFor: d.BreakerOpenFor, BreakerFailures: d.BreakerFailures,
		BreakerWindow: d.BreakerWindow, BreakerFailureRatio: float64(d.BreakerFailurePercent) / 100})
	if err != nil {
		return nil, err
	}
	return redisconn.New(redisconn.Options{Client: c, Script: redis.NewScript("return 0"), Timeout: timeout,
		WireTimeout: max(d.WireTimeout, timeout), BusyTimeout: max(d.BusyTimeout, timeout), Pipeline: true,
		PipelineMax: d.PipelineMax, PipelineSenders: d.PipelineSenders, TickSlack: d.TickSlack}, h, redisconn.SystemClock{Epoch: time.Now()})
}
