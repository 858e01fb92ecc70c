package gateway

import (
	"runtime"
	"strconv"
	"testing"
	"time"

	"vendorgate/config"
	"vendorgate/shared/testredis"
	"vendorgate/shared/wire"
)

// BenchmarkMemoryPerVendor reports the heap a gateway keeps per active key,
// each its own vendor: one proxied request per key through the handler
// (default policies, usage counted), then the live heap after a
// collection, against the heap before the first request (the test
// backend's own records of the keys are already counted there). "local"
// limits in process (the in-process limiter and usage store), "redis" on a
// private Redis (leases, usage flushed there). Run with -memprofile,
// -memprofilerate 1 and `go tool pprof -sample_index=inuse_space` to see
// what holds it. It waits, up to 40 s, for a minute's start before it
// counts (see below): without that, the Redis figure moved by hundreds of
// bytes either way between runs. Run each sub-benchmark in a process of
// its own (-benchtime 1x, one count): a Redis run after other runs in the
// same process still read hundreds of bytes low.
func BenchmarkMemoryPerVendor(b *testing.B) {
	b.Run("local", func(b *testing.B) { memoryPerVendor(b, nil) })
	b.Run("redis", func(b *testing.B) {
		rs := testredis.Start(b)
		memoryPerVendor(b, func(o *Options) { o.Config.Redis.URL = config.List{rs.URL()} })
	})
}

func memoryPerVendor(b *testing.B, mod func(*Options)) {
	const keys = 20000
	for range b.N {
		b.StopTimer()
		be := newTestBackend(b)
		gw := startGateway(b, be, func(o *Options) {
			o.Config.Limits.Vendor.Reads = config.Limit{Rate: 1 << 30, Period: time.Second}
			o.Config.KeyCache.Size = 100000
			// Seldom a flush during the run: what a vendor holds between flushes,
			// not the in-process usage store's minutes.
			o.Config.Usage.FlushInterval = time.Minute
			o.DisableAccessLog = true
			if mod != nil {
				mod(o)
			}
		})
		ks := make([]string, keys)
		for i := range ks {
			ks[i], _ = be.addKey("vendor-"+strconv.Itoa(i)+"-0123456789abcdef0123456789ab", wire.VendorApproved, time.Now().Add(time.Hour))
		}
		send := readAs(b, gw.g.Handler())
		send(ks[0]) // pools, connections and metric children exist before counting
		// The usage flush falls on each minute's start (wall-clock multiples
		// of its interval) and holds a row per vendor while it is applied, to
		// Redis slowly: both readings are taken within one minute, from a
		// second after its start, so that no flush's rows count.
		if left := time.Until(time.Now().Truncate(time.Minute).Add(time.Minute)); left < 40*time.Second {
			time.Sleep(left + time.Second)
		}
		before := settledHeap()
		b.StartTimer()
		for _, k := range ks {
			send(k)
		}
		b.StopTimer()
		after := settledHeap()
		b.ReportMetric(float64(after-before)/keys, "B/vendor")
		runtime.KeepAlive(gw)
		runtime.KeepAlive(be)
	}
}

// settledHeap is the live heap once it stops shrinking: what an earlier
// run of the benchmark left to stop (its gateway's and backend's
// goroutines) is gone from the count before it is taken.
func settledHeap() int64 {
	h := liveHeap()
	for range 40 {
		time.Sleep(50 * time.Millisecond)
		next := liveHeap()
		if h-next < 64<<10 {
			return next
		}
		h = next
	}
	return h
}

func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
