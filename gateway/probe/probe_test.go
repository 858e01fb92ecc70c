package probe

import (
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"

	"vendorgate/shared/testredis"
	"vendorgate/shared/wire"
)

const token = "probe-test-token-0123456789"

// backend is a real HTTP responder for wire.ReadyPath: 200 with the token,
// 401 without, status otherwise.
func backend(t *testing.T, status *atomic.Int64) (url string, stop func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{CloseOnShutdown: true, Handler: func(ctx *fasthttp.RequestCtx) {
		switch {
		case string(ctx.Path()) != wire.ReadyPath:
			ctx.SetStatusCode(404)
		case string(ctx.Request.Header.Peek(wire.HeaderInternalToken)) != token:
			ctx.SetStatusCode(401)
		default:
			ctx.SetStatusCode(int(status.Load()))
		}
	}}
	go func() { _ = srv.Serve(ln) }()
	stop = func() { _ = ln.Close(); _ = srv.Shutdown() }
	t.Cleanup(stop)
	return "http://" + ln.Addr().String(), stop
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func running() int {
	buf := make([]byte, 1<<20)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), "probe.(*target).run")
}

// TestProber: verdicts follow the dependencies without any other traffic,
// a wrong token or a 503 is not ready, and Close leaves no prober goroutine.
func TestProber(t *testing.T) {
	rs := testredis.Start(t)
	client := redis.NewClient(&redis.Options{Addr: rs.Addr(), MaxRetries: -1})
	defer client.Close()
	var okStatus, wrongStatus atomic.Int64
	okStatus.Store(200)
	wrongStatus.Store(200)
	up, stopUp := backend(t, &okStatus)
	sick, _ := backend(t, &wrongStatus)
	o := testOptions(up, sick)
	o.Redis, o.RedisTimeout, o.Interval = client, 250*time.Millisecond, 100*time.Millisecond
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// New returns with first verdicts.
	if p.Redis() != nil || p.Backend(0) != nil || p.Backend(1) != nil {
		t.Fatalf("first verdicts: redis %v, backends %v %v", p.Redis(), p.Backend(0), p.Backend(1))
	}
	if n := running(); n != 3 {
		t.Fatalf("%d prober goroutines, want 3", n)
	}

	rs.Stop()
	waitFor(t, "redis stopped", func() bool { return p.Redis() != nil })
	rs.Restart(t)
	waitFor(t, "redis back", func() bool { return p.Redis() == nil })

	stopUp()
	waitFor(t, "backend stopped", func() bool { return p.Backend(0) != nil })
	if !strings.Contains(p.Backend(0).Error(), strings.TrimPrefix(up, "http://")) {
		t.Fatalf("reason %q does not name the backend", p.Backend(0))
	}
	wrongStatus.Store(503)
	waitFor(t, "backend 503", func() bool { return p.Backend(1) != nil })
	if !strings.Contains(p.Backend(1).Error(), "503") {
		t.Fatalf("reason %q", p.Backend(1))
	}

	p.Close()
	if n := running(); n != 0 {
		t.Fatalf("%d prober goroutines after Close", n)
	}
}

// TestProberWrongToken: a backend that refuses the token is not ready.
func TestProberWrongToken(t *testing.T) {
	var status atomic.Int64
	status.Store(200)
	u, _ := backend(t, &status)
	o := testOptions(u)
	o.InternalToken = "another-token-0123456789"
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Backend(0); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("wrong token: %v", err)
	}
	if p.Redis() != nil {
		t.Fatalf("no Redis configured, yet a Redis verdict: %v", p.Redis())
	}
}
