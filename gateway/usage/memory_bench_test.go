package usage

import (
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"vendorgate/shared/testredis"
)

// BenchmarkRedisMemory10kVendors fills the buckets a full day leaves in
// Redis, every one of 10,000 vendors active in every minute of the last
// hour and every hour of 25 (reads and orders allowed, some reads limited),
// and reports the memory the usage keys take.
func BenchmarkRedisMemory10kVendors(b *testing.B) {
	const vendors = 10000
	srv, st := benchStore(b)
	used := func() float64 { return infoSum(b, srv, "memory", "used_memory") }
	ids := make([]string, vendors)
	for i := range ids {
		ids[i] = uuid.NewString()
	}
	before := used()
	now := time.Now()
	nowMin := now.Unix() / 60
	rows := make([]Row, vendors)
	for i := range rows {
		rows[i].Vendor = ids[i]
		rows[i].Add(0, 100)
		rows[i].Add(1, 7)
		rows[i].Add(3, 9)
	}
	var ds []*Delta
	// One minute in each of the 25 hours before, then every minute of the last hour.
	for h := int64(25); h >= 1; h-- {
		ds = append(ds, &Delta{ID: "h" + strconv.FormatInt(h, 10), Minute: nowMin - h*60 - 60, Rows: rows, Names: benchNames})
	}
	for m := int64(59); m >= 0; m-- {
		ds = append(ds, &Delta{ID: "m" + strconv.FormatInt(m, 10), Minute: nowMin - m, Rows: rows, Names: benchNames})
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, d := range ds {
			if errs := st.Apply([]*Delta{d}); errs != nil && errs[0] != nil {
				b.Fatal(errs[0])
			}
		}
	}
	b.StopTimer()
	keys := srv.Do(b, "DBSIZE")
	b.ReportMetric((used()-before)/1e6, "MB")
	b.Logf("keys: %s", keys)
}

// benchNames are the default table's names by index: reads and orders
// counted (Values[0], [1]: reads allowed and limited; [3]: orders allowed).
var benchNames = []string{"reads", "orders", "key-reads", "key-orders"}

// BenchmarkLocalMemory10kVendors is BenchmarkRedisMemory10kVendors for the
// in-process store (a gateway without Redis): the same day of buckets, and
// the live heap they take.
func BenchmarkLocalMemory10kVendors(b *testing.B) {
	const vendors = 10000
	now := time.Now()
	nowMin := now.Unix() / 60
	rows := make([]Row, vendors)
	for i := range rows {
		rows[i].Vendor = uuid.NewString()
		rows[i].Add(0, 100)
		rows[i].Add(1, 7)
		rows[i].Add(3, 9)
	}
	var ds []*Delta
	for h := int64(25); h >= 1; h-- {
		ds = append(ds, &Delta{ID: "h" + strconv.FormatInt(h, 10), Minute: nowMin - h*60 - 60, Rows: rows, Names: benchNames})
	}
	for m := int64(59); m >= 0; m-- {
		ds = append(ds, &Delta{ID: "m" + strconv.FormatInt(m, 10), Minute: nowMin - m, Rows: rows, Names: benchNames})
	}
	var st *Local
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		before := heapInUse()
		st = NewLocal(func() time.Time { return now })
		b.StartTimer()
		for _, d := range ds {
			st.Apply([]*Delta{d})
		}
		b.StopTimer()
		b.ReportMetric(float64(heapInUse()-before)/1e6, "MB")
		runtime.KeepAlive(st)
	}
}

func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// benchStore starts a Redis for a benchmark and a store on it.
func benchStore(b *testing.B) (*testredis.Server, *Redis) {
	srv := testredis.Start(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	b.Cleanup(func() { _ = c.Close() })
	st, err := NewRedis(RedisOptions{Client: c, Timeout: 10 * time.Second, GuardTTL: testGuardTTL})
	if err != nil {
		b.Fatal(err)
	}
	return srv, st
}

// infoSum is the sum of the named numeric fields of an INFO section.
func infoSum(b *testing.B, srv *testredis.Server, section string, names ...string) float64 {
	sum, ok := srv.Info(b, section).Sum(names...)
	if !ok {
		b.Fatalf("no %v in INFO %s", names, section)
	}
	return sum
}
