package inflight

import (
	"sync"
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
// back leaves the counts at zero. The takers of a round hold what they
// got until every one of them has asked (a barrier, not a sleep), so that
// the slots held overlap: with more takers than the cap, a cap that let
// one too many in is seen holding it. (Not that the cap is always
// reached: a download refused by its own cap counted among the requests
// for a moment, and a request asking then was refused.)
func TestConcurrentCaps(t *testing.T) {
	c := New()
	caps := Caps{Requests: 5, Downloads: 2}
	const takers, rounds = 8, 300
	var asked, released sync.WaitGroup
	type take struct {
		download, held bool
	}
	took := make(chan take, takers)
	next := make([]chan struct{}, takers) // a round's go-ahead, per taker
	for i := range next {
		next[i] = make(chan struct{})
	}
	var wg sync.WaitGroup
	for g := range takers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				<-next[g]
				download := (g+i)%3 == 0
				s, _ := c.Acquire("v", caps, download)
				took <- take{download: download, held: s != nil}
				asked.Done()
				<-next[g] // every taker of the round has asked: give back
				if s != nil {
					s.Release()
				}
				released.Done()
			}
		}()
	}
	for i := range rounds {
		asked.Add(takers)
		released.Add(takers)
		for _, ch := range next {
			ch <- struct{}{}
		}
		asked.Wait()
		requests, downloads, downloadsAsked := 0, 0, 0
		for range takers {
			tk := <-took
			if tk.download {
				downloadsAsked++
			}
			if !tk.held {
				continue
			}
			requests++
			if tk.download {
				downloads++
			}
		}
		if r, d := c.InFlight("v"); r != requests || d != downloads {
			t.Fatalf("round %d: the counter says %d requests and %d downloads in flight, the takers hold %d and %d", i, r, d, requests, downloads)
		}
		// Every taker asked while all the slots given were held.
		if requests > int(caps.Requests) || downloads > int(caps.Downloads) {
			t.Fatalf("round %d: %d requests (%d downloads of %d asked) held at once; caps %d and %d",
				i, requests, downloads, downloadsAsked, caps.Requests, caps.Downloads)
		}
		for _, ch := range next {
			ch <- struct{}{}
		}
		released.Wait()
	}
	wg.Wait()
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
