package concurrency

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"vendorgate/shared/testredis"
)

// holdTwo takes the two slots of a cap of 2 on l and checks a third is
// refused.
func holdTwo(t *testing.T, l *Redis, key string) []*Held {
	t.Helper()
	var hs []*Held
	for i := 0; i < 2; i++ {
		h, refused, err := l.Acquire(slots(2, key))
		if err != nil || refused != -1 {
			t.Fatalf("slot %d: refused %d, %v", i, refused, err)
		}
		hs = append(hs, h)
	}
	if _, refused, err := l.Acquire(slots(2, key)); err != nil || refused != 0 {
		t.Fatalf("a third at a cap of 2: refused %d, %v; want refused", refused, err)
	}
	return hs
}

// A Redis that loses its data (FLUSHALL here; a restart without
// persistence or a failover to a replica that had not the members is the
// same) while streams are held: the holder's next refresh puts its live
// slots back, and a new request at the cap is refused again. Before, the
// refresh renewed only the members it still found, and the cap of 2 let 2
// more in for as long as the held streams ran.
func TestSlotsComeBackAfterFlush(t *testing.T) {
	srv := testredis.Start(t)
	const key = "vg:{v:v1}:reports:slots"
	var lost int
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	l, err := NewRedis(Options{Client: c, Conn: transport(t, srv.Addr(), 2*time.Second), TTL: 10 * time.Second, Refresh: 100 * time.Millisecond, Timeout: 2 * time.Second,
		OnLost: func(n int) { lost += n }})
	if err != nil {
		t.Fatal(err)
	}
	held := holdTwo(t, l, key)
	srv.Do(t, "FLUSHALL")
	waitCount(t, srv, key, 2)
	if _, refused, err := l.Acquire(slots(2, key)); err != nil || refused != 0 {
		t.Fatalf("after FLUSHALL and a refresh: refused %d, %v; want refused at the cap", refused, err)
	}
	l.Close() // OnLost's count is read after the refresher ended
	if lost != 2 {
		t.Fatalf("OnLost told of %d slots, want the 2 found gone", lost)
	}
	for _, h := range held {
		h.Release()
	}
}

// Redis stopped past the slot TTL (SIGSTOP: the sets expire meanwhile):
// the refreshes fail, and the first that Redis answers after it resumes
// puts the live slots back; a request at the cap is refused again. Before,
// the refreshes found no member to renew and the slots were never counted
// again while their streams ran.
func TestSlotsComeBackAfterPause(t *testing.T) {
	srv := testredis.Start(t)
	const key = "vg:{v:v1}:reports:slots"
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	const ttl = 600 * time.Millisecond
	failed := make(chan struct{}, 1)
	l, err := NewRedis(Options{Client: c, Conn: transport(t, srv.Addr(), 100*time.Millisecond), TTL: ttl, Refresh: ttl / 3, Timeout: 100 * time.Millisecond,
		OnError: func(string, error) {
			select {
			case failed <- struct{}{}:
			default:
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	held := holdTwo(t, l, key)
	t.Cleanup(srv.Resume) // a failed test's Redis is not left stopped
	srv.Pause()
	<-failed            // a refresh failed while Redis was stopped
	time.Sleep(2 * ttl) // the fault itself: stopped past the slot TTL
	srv.Resume()
	waitCount(t, srv, key, 2)
	if _, refused, err := l.Acquire(slots(2, key)); err != nil || refused != 0 {
		t.Fatalf("after a pause past the TTL: refused %d, %v; want refused at the cap", refused, err)
	}
	for _, h := range held {
		h.Release()
	}
	waitCount(t, srv, key, 0)
}

// A slot acquire whose reply comes after the call's timeout: the request
// is answered 503 and Redis may still have taken the slot when it reads
// the call. The limiter gives it back (the release is sent when the call
// fails), so once Redis answers again the slot is free within a round trip
// of the release, not at the slot's TTL, and the next acquire at the cap is
// admitted.
func TestTimedOutAcquireGivesItsSlotBack(t *testing.T) {
	srv := testredis.Start(t)
	const key = "vg:{v:v1}:reports:slots"
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	l, err := NewRedis(Options{Client: c, Conn: transport(t, srv.Addr(), 100*time.Millisecond), TTL: time.Minute, Refresh: 20 * time.Second, Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	first, refused, err := l.Acquire(slots(2, key))
	if err != nil || refused != -1 {
		t.Fatalf("first slot: refused %d, %v", refused, err)
	}
	t.Cleanup(srv.Resume)
	srv.Pause()
	start := time.Now()
	h, _, err := l.Acquire(slots(2, key))
	if err == nil || h != nil {
		t.Fatalf("acquire with Redis stopped: held %v, err %v; want a timeout", h, err)
	}
	if l.Held() != 1 {
		t.Fatalf("%d held after the timed-out acquire, want 1", l.Held())
	}
	// Redis reads the timed-out call and its release only when it
	// resumes; stopped well within the release's own bound (1 s).
	time.Sleep(500*time.Millisecond - time.Since(start))
	srv.Resume()
	// Redis runs the timed-out call when it resumes (its bytes were
	// waiting), then the release sent when the call failed: the slot is
	// free again long before its TTL (a minute), and the next acquire at
	// the cap is admitted.
	waitCount(t, srv, key, 1)
	second, refused, err := l.Acquire(slots(2, key))
	if err != nil || refused != -1 {
		t.Fatalf("the first acquire after the release: refused %d, %v; want admitted (the timed-out call's slot given back)", refused, err)
	}
	if n := srv.Do(t, "ZCARD", key); n != "2" && n != ":2" {
		t.Fatalf("%s holds %s members, want 2", key, n)
	}
	first.Release()
	second.Release()
	waitCount(t, srv, key, 0)
}

// Redis restarted without its data (killed, and started again empty on
// its port): the refreshes fail while it is down, tried again every
// Timeout but told to OnError once a Refresh only, and the first that
// reaches the new Redis puts the held slots back.
func TestSlotsComeBackAfterRestart(t *testing.T) {
	srv := testredis.Start(t)
	const key = "vg:{v:v1}:reports:slots"
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	const refresh = 200 * time.Millisecond
	var told atomic.Int64
	l, err := NewRedis(Options{Client: c, Conn: transport(t, srv.Addr(), 10*time.Millisecond), TTL: 3 * refresh, Refresh: refresh, Timeout: 10 * time.Millisecond,
		OnError: func(string, error) { told.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	held := holdTwo(t, l, key)
	srv.Stop()
	down := time.Now()
	time.Sleep(5 * refresh) // the fault itself: down for five refresh periods
	srv.Restart(t)
	downFor := time.Since(down)
	waitCount(t, srv, key, 2)
	if _, refused, err := l.Acquire(slots(2, key)); err != nil || refused != 0 {
		t.Fatalf("after a restart without the data: refused %d, %v; want refused at the cap", refused, err)
	}
	// Once a refresh period while down, and one for the first failure.
	if n, most := told.Load(), int64(downFor/refresh)+2; n < 1 || n > most {
		t.Fatalf("OnError told %d times in %s down, want 1 to %d (once a refresh period)", n, downFor.Round(time.Millisecond), most)
	}
	for _, h := range held {
		h.Release()
	}
	waitCount(t, srv, key, 0)
}
