package inflight

import (
	"sync"
	"sync/atomic"
	"testing"
)

func TestCaps(t *testing.T) {
	c := New()
	caps := Caps{Requests: 3, Downloads: 2}
	var held []Slot
	take := func(vendor string, download bool, want Refusal) {
		t.Helper()
		s, r := c.Acquire(vendor, caps, download)
		if r != want || (s != nil) != (want == Admitted) {
			t.Fatalf("%s download=%v: %v %v, want %v", vendor, download, s, r, want)
		}
		if s != nil {
			held = append(held, s)
		}
	}
	take("a", true, Admitted)
	take("a", true, Admitted)
	take("a", true, OverDownloads) // the download cap
	take("a", false, Admitted)
	take("a", false, OverRequests) // downloads count among requests
	take("a", true, OverRequests)
	take("b", true, Admitted) // another vendor's own counts
	if r, d := c.InFlight("a"); r != 3 || d != 2 {
		t.Fatalf("a in flight: %d requests, %d downloads; want 3 and 2", r, d)
	}
	held[0].Release() // a download of a
	if r, d := c.InFlight("a"); r != 2 || d != 1 {
		t.Fatalf("after a download's release: %d requests, %d downloads; want 2 and 1", r, d)
	}
	take("a", true, Admitted)
	for _, s := range held[1:] {
		s.Release()
	}
	if r, d := c.Total(); r != 0 || d != 0 {
		t.Fatalf("all released: %d requests, %d downloads in flight", r, d)
	}
}

// Concurrent takers never hold more than the caps, and every slot given
// back leaves the counts at zero.
func TestConcurrentCaps(t *testing.T) {
	c := New()
	caps := Caps{Requests: 5, Downloads: 2}
	var holding, downloading atomic.Int32 // slots held, as their holders count them
	var mu sync.Mutex
	var maxR, maxD int32
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				download := (g+i)%3 == 0
				s, _ := c.Acquire("v", caps, download)
				if s == nil {
					continue
				}
				r, d := holding.Add(1), downloading.Load()
				if download {
					d = downloading.Add(1)
				}
				mu.Lock()
				maxR, maxD = max(maxR, r), max(maxD, d)
				mu.Unlock()
				holding.Add(-1)
				if download {
					downloading.Add(-1)
				}
				s.Release()
			}
		}()
	}
	wg.Wait()
	if maxR > 5 || maxD > 2 {
		t.Fatalf("seen %d requests and %d downloads in flight; caps 5 and 2", maxR, maxD)
	}
	if r, d := c.InFlight("v"); r != 0 || d != 0 {
		t.Fatalf("left %d requests, %d downloads in flight", r, d)
	}
}

func TestAcquireAllocs(t *testing.T) {
	c := New()
	caps := Caps{Requests: 64, Downloads: 8}
	c.Acquire("vendor-a", caps, false) // the vendor's entry
	for _, download := range []bool{false, true} {
		if n := testing.AllocsPerRun(1000, func() {
			s, _ := c.Acquire("vendor-a", caps, download)
			s.Release()
		}); n != 0 {
			t.Fatalf("download=%v: %.1f allocations per slot", download, n)
		}
	}
}
