package usage

import (
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
)

// BenchmarkRedisApplyCPU flushes 10,000 vendors' counts into one minute, as
// every flush of a many-vendor load does (each vendor's reads allowed under
// its first policy, the minute's and the hour's fields already there), and
// reports Redis' own CPU (INFO cpu, user + system) per vendor row: the
// usage view's share of Redis' work, beside the limiter's.
func BenchmarkRedisApplyCPU(b *testing.B) {
	const vendors = 10000
	srv, st := benchStore(b)
	cpu := func() float64 { return infoSum(b, srv, "cpu", "used_cpu_user", "used_cpu_sys") }
	rows := make([]Row, vendors)
	for i := range rows {
		rows[i].Vendor = uuid.NewString()
		rows[i].Add(0, 6)
	}
	minute := time.Now().Unix() / 60
	apply := func(id string) {
		if errs := st.Apply([]*Delta{{ID: id, Minute: minute, Rows: rows, Names: benchNames}}); errs != nil && errs[0] != nil {
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
