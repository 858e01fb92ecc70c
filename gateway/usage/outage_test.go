package usage_test

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"vendorgate/gateway/usage"
)

// refusedPost posts to a loopback port nothing listens on: the backend is
// down and every flush part is refused at connect.
func refusedPost(t *testing.T) func(ctx context.Context, body []byte) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	_ = ln.Close()
	return post(dead)
}

// stepClock is a clock a test moves by hand.
type stepClock struct{ ns atomic.Int64 }

func (c *stepClock) Now() time.Time        { return time.Unix(0, c.ns.Load()) }
func (c *stepClock) Add(d time.Duration)   { c.ns.Add(int64(d)) }
func newStepClock(at time.Time) *stepClock { c := new(stepClock); c.ns.Store(at.UnixNano()); return c }

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestBackendOutageHoldsBoundedMemory: while the backend refuses every
// usage flush, a gateway counting 1,000 vendors every 5 s keeps what it
// could not send in memory that grows by one row a vendor a minute (the
// flushes held back are merged by minute, in rows of 72 bytes), not by
// 400 bytes a vendor a flush as it did: 43 MB over these nine minutes,
// and 29 GB for an hour of 100,000 vendors.
func TestBackendOutageHoldsBoundedMemory(t *testing.T) {
	be, err := usage.NewBackend(usage.BackendOptions{Timeout: 5 * time.Second, Post: refusedPost(t)})
	if err != nil {
		t.Fatal(err)
	}
	clk := newStepClock(time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC))
	const vendors, interval, flushes = 1000, 5 * time.Second, 120
	r, err := usage.New(usage.Options{Stores: []usage.Store{be}, Interval: time.Hour, MaxAge: time.Hour, MaxBytes: 32 << 20, Now: clk.Now,
		Names: func() []string { return []string{"standard"} }})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	counters := make([]*usage.Counter, vendors)
	for i := range counters {
		counters[i] = r.For(fmt.Sprintf("vendor-%04d", i))
	}
	flush := func() {
		for _, c := range counters {
			c.Allowed(0)
		}
		clk.Add(interval)
		r.Flush()
	}
	for range 12 { // the first minute
		flush()
	}
	before := heapInUse()
	for range flushes - 12 {
		flush()
	}
	after := heapInUse()
	grown := int64(after) - int64(before)
	t.Logf("heap after 1 minute %d B, after %d flushes %d B: %d B a vendor a minute", before, flushes, after, grown/vendors/9)
	// Nine more minutes of 1,000 vendors: 1 MB is 110 bytes a vendor a
	// minute.
	if grown > 1<<20 {
		t.Errorf("the refused flushes grew the heap by %d bytes over nine minutes of %d vendors (%d a vendor a flush)", grown, vendors, grown/vendors/(flushes-12))
	}
}

// downBackend starts the real backend and returns a Backend store that
// reaches it only once up is set (before, every post is refused at
// connect), its admin URL, and a clock at 10:00 UTC.
func downBackend(t *testing.T) (be *usage.Backend, admin string, up *atomic.Bool, clk *stepClock) {
	_, api, admin := startBackend(t)
	up = new(atomic.Bool)
	live, dead := post(api), refusedPost(t)
	be, err := usage.NewBackend(usage.BackendOptions{Timeout: 5 * time.Second, Post: func(ctx context.Context, body []byte) error {
		if up.Load() {
			return live(ctx, body)
		}
		return dead(ctx, body)
	}})
	if err != nil {
		t.Fatal(err)
	}
	return be, admin, up, newStepClock(time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC))
}

// monthAllowed is the requests allowed in the month report, every vendor
// and policy summed.
func monthAllowed(t *testing.T, admin string) (n uint64) {
	for _, v := range monthOf(t, admin).Vendors {
		for _, p := range v.Requests {
			n += uint64(p.Allowed)
		}
	}
	return n
}

// TestBackendOutageLosesNothingAndStallsNoView: through a three-minute
// outage of the backend the usage view's store keeps taking every flush
// (its own queue is empty: each minute reads what was counted in it), the
// backend's queue holds at most a flush a minute, and once the backend is
// back one flush brings it every request counted, once.
func TestBackendOutageLosesNothingAndStallsNoView(t *testing.T) {
	be, admin, up, clk := downBackend(t)
	local := usage.NewLocal(clk.Now)
	var last usage.FlushReport
	r, err := usage.New(usage.Options{Stores: []usage.Store{local, be}, Interval: time.Hour, MaxAge: time.Hour, MaxBytes: 32 << 20,
		Now: clk.Now, Names: func() []string { return []string{"standard"} }, OnFlush: func(rep usage.FlushReport) { last = rep }})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	const vendors, minutes = 200, 3
	counters := make([]*usage.Counter, vendors)
	for i := range counters {
		counters[i] = r.For(fmt.Sprintf("vendor-%04d", i))
	}
	counted := uint64(0)
	for m := range minutes {
		for range 12 {
			for _, c := range counters {
				c.Allowed(0)
				counted++
			}
			clk.Add(5 * time.Second)
			r.Flush()
			if last.Err == nil {
				t.Fatal("a flush the backend refused reported no error")
			}
		}
		minute := clk.Now().Unix()/60 - 1
		b, err := local.Read([]int64{minute}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := b.Minutes[minute]["vendor-0007"]["standard"].Allowed; got != 12 {
			t.Fatalf("minute %d of the outage: the view's store has %d of vendor-0007's 12 requests", m+1, got)
		}
		if last.Pending > m+2 {
			t.Fatalf("minute %d of the outage: %d flushes pending, want at most one a minute and the one tried first", m+1, last.Pending)
		}
	}
	up.Store(true)
	clk.Add(5 * time.Second)
	r.Flush()
	if last.Err != nil || last.Pending != 0 || last.PendingBytes != 0 || last.Dropped != 0 {
		t.Fatalf("after the backend came back: %+v", last)
	}
	if got := monthAllowed(t, admin); got != counted {
		t.Fatalf("the backend's month counts %d requests allowed, %d were counted", got, counted)
	}
}

// TestBackendOutagePastTheBudgetCountsWhatItDrops: a queue past its bytes
// drops its oldest flushes, never the newest, and reports the requests
// they counted: what reaches the backend and what was reported dropped add
// up to what was counted.
func TestBackendOutagePastTheBudgetCountsWhatItDrops(t *testing.T) {
	be, admin, up, clk := downBackend(t)
	var last usage.FlushReport
	var dropped uint64
	const vendors, budget = 300, 40 << 10 // a minute of 300 vendors: about 25 KB
	r, err := usage.New(usage.Options{Stores: []usage.Store{be}, Interval: time.Hour, MaxAge: time.Hour, MaxBytes: budget,
		Now: clk.Now, Names: func() []string { return []string{"standard"} },
		OnFlush: func(rep usage.FlushReport) { last = rep; dropped += rep.DroppedCounts }})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	counted := uint64(0)
	for i := range 5 * 12 { // five minutes
		for v := range vendors {
			r.For(fmt.Sprintf("vendor-%04d", v)).Allowed(0)
			counted++
		}
		clk.Add(5 * time.Second)
		r.Flush()
		if last.PendingBytes > budget && last.Pending > 1 {
			t.Fatalf("flush %d: %d bytes in %d flushes pending, over the budget of %d", i, last.PendingBytes, last.Pending, budget)
		}
	}
	if dropped == 0 {
		t.Fatal("five minutes of 300 vendors fit a 40 KB budget: the test drops nothing")
	}
	up.Store(true)
	clk.Add(5 * time.Second)
	r.Flush()
	if last.Err != nil || last.Pending != 0 {
		t.Fatalf("after the backend came back: %+v", last)
	}
	if got := monthAllowed(t, admin); got+dropped != counted {
		t.Fatalf("the backend counts %d requests, %d were reported dropped: %d, not the %d counted", got, dropped, got+dropped, counted)
	}
}
