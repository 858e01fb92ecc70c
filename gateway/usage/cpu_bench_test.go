package usage

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"vendorgate/shared/testredis"
)

// BenchmarkRedisApplyCPU flushes 10,000 vendors' counts into one minute, as
// every flush of a many-vendor load does (each vendor's reads allowed under
// its first policy, the minute's and the hour's fields already there), and
// reports Redis' own CPU (INFO cpu, user + system) per vendor row: the
// usage view's share of Redis' work, beside the limiter's.
func BenchmarkRedisApplyCPU(b *testing.B) {
	const vendors = 10000
	srv := testredis.Start(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	defer c.Close()
	st, err := NewRedis(RedisOptions{Client: c, Timeout: 10 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	cpu := func() float64 {
		var sum float64
		for _, l := range strings.Split(srv.Do(b, "INFO", "cpu"), "\n") {
			l = strings.TrimSpace(l)
			for _, name := range []string{"used_cpu_user:", "used_cpu_sys:"} {
				if v, ok := strings.CutPrefix(l, name); ok {
					n, _ := strconv.ParseFloat(v, 64)
					sum += n
				}
			}
		}
		return sum
	}
	rows := make([]Row, vendors)
	for i := range rows {
		rows[i].Vendor = uuid.NewString()
		rows[i].Values[0] = 6
	}
	minute := time.Now().Unix() / 60
	apply := func(id string) {
		if errs := st.Apply([]*Delta{{ID: id, Minute: minute, Rows: rows}}); errs != nil && errs[0] != nil {
			b.Fatal(errs[0])
		}
	}
	apply("warm")
	before := cpu()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		apply("f" + strconv.Itoa(i))
	}
	b.StopTimer()
	b.ReportMetric((cpu()-before)*1e6/float64(b.N*vendors), "redis-µs/row")
}
