package concurrency

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"vendorgate/shared/testredis"
)

// BenchmarkAcquireRelease is a request's slot on a real Redis: take one
// slot of each of two sets (a vendor's and its key's), then give them back,
// as a download does. serial is one request at a time; parallel is 16 a
// CPU, whose takes share the transport's round trips and whose releases
// share the releaser's. Reported beside time: Redis' script calls and its
// CPU per request (the releases, sent after the benchmark's last request,
// are waited for before Redis is read), and allocations (every
// goroutine's: the transport's sender and the releaser count).
func BenchmarkAcquireRelease(b *testing.B) {
	srv := testredis.Start(b)
	for _, tc := range []struct {
		name string
		par  int
	}{{"serial", 0}, {"parallel", 16}} {
		b.Run(tc.name, func(b *testing.B) {
			l := newRedis(b, srv.Addr(), 15*time.Second, 5*time.Second)
			one := func(vendor int) {
				set := fmt.Sprintf("vg:{v:%d}:reports:slots", vendor)
				var ss Slots
				ss.Add(Slot{Key: set, Cap: 1 << 20})
				ss.Add(Slot{Key: set + ":k", Cap: 1 << 20})
				h, refused, err := l.Acquire(&ss)
				if err != nil || refused != -1 {
					b.Errorf("acquire: refused %d, %v", refused, err)
					return
				}
				h.Release()
			}
			one(0) // the scripts loaded, the connections made
			waitReleased(b, srv, l)
			before := srv.Info(b, "commandstats", "cpu")
			b.ReportAllocs()
			b.ResetTimer()
			if tc.par == 0 {
				for i := 0; b.Loop(); i++ {
					one(i % 64)
				}
			} else {
				b.SetParallelism(tc.par)
				b.RunParallel(func(pb *testing.PB) {
					for i := 0; pb.Next(); i++ {
						one(i % 64)
					}
				})
			}
			b.StopTimer()
			waitReleased(b, srv, l)
			after := srv.Info(b, "commandstats", "cpu")
			b.ReportMetric(float64(after.Scripts()-before.Scripts())/float64(b.N), "scripts/op")
			b.ReportMetric((after.CPU()-before.CPU())*1e6/float64(b.N), "redis-µs/op")
		})
	}
}

// waitReleased waits until Redis holds no slot of l's (its releases are
// batched off the caller's path).
func waitReleased(b *testing.B, srv *testredis.Server, l *Redis) {
	b.Helper()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p := c.Pipeline()
		var cards []*redis.IntCmd
		for v := 0; v < 64; v++ {
			set := fmt.Sprintf("vg:{v:%d}:reports:slots", v)
			cards = append(cards, p.ZCard(b.Context(), set), p.ZCard(b.Context(), set+":k"))
		}
		if _, err := p.Exec(b.Context()); err != nil {
			b.Fatal(err)
		}
		n := 0
		for _, card := range cards {
			if card.Val() != 0 {
				n++
			}
		}
		if n == 0 && l.Held() == 0 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d sets still hold slots, %d held", n, l.Held())
		}
		time.Sleep(time.Millisecond)
	}
}
