package window

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"vendorgate/gateway/policy"
	"vendorgate/shared/testredis"
)

// BenchmarkSteady charges vendors' buckets round robin in a real Redis,
// the clock moving so that each vendor asks exactly at its limit (a
// sliding window of 120 a minute, 1,000 vendors: about 120 members in each
// set; 10,000 an hour, 20 vendors; a quota of 1,000 a day), and reports Redis's CPU per call and the memory
// of one bucket (MEMORY USAGE, the average of all).
func BenchmarkSteady(b *testing.B) {
	for _, tc := range []struct {
		name    string
		rate    policy.Rate
		vendors int
	}{
		{"sliding-120-per-minute", sliding("reads", 120, time.Minute), 1000},
		{"sliding-10000-per-hour", sliding("reads", 10000, time.Hour), 20},
		{"quota-1000-per-day", quota("orders-day", 1000, policy.Calendar{Days: 1}), 1000},
	} {
		// The clock's step per call: each vendor's call comes every
		// period/limit.
		step := tc.rate.Period / time.Duration(tc.rate.Limit) / time.Duration(tc.vendors)
		b.Run(tc.name, func(b *testing.B) {
			rs := testredis.Start(b)
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			r := newRedisLimiter(b, rs, &now)
			info := redis.NewClient(&redis.Options{Addr: rs.Addr()})
			defer info.Close()
			keys := make([]string, tc.vendors)
			for i := range keys {
				keys[i] = "vg:{v:" + strconv.Itoa(i) + "}:" + tc.rate.Name
			}
			call := func(i int) {
				now = now.Add(step)
				if _, err := r.Charge(checks(policy.Check{Key: keys[i%len(keys)], Rate: tc.rate})); err != nil {
					b.Fatal(err)
				}
			}
			// Fill every bucket to its steady state first.
			fill := int(tc.rate.Limit) * len(keys)
			if tc.rate.Kind == policy.Quota {
				fill = 10 * len(keys) // a counter is the same size at any count
			}
			for i := range fill {
				call(i)
			}
			cpu0 := rs.Info(b, "cpu").CPU()
			b.ResetTimer()
			for i := range b.N {
				call(i)
			}
			b.StopTimer()
			b.ReportMetric((rs.Info(b, "cpu").CPU()-cpu0)*1e6/float64(b.N), "redis-us/op")
			var mem int64
			n := 0
			iter := info.Scan(context.Background(), 0, "win:*", 1000).Iterator()
			for iter.Next(context.Background()) {
				m, _ := info.MemoryUsage(context.Background(), iter.Val(), 0).Result()
				mem += m
				n++
			}
			b.ReportMetric(float64(mem)/float64(max(n, 1)), "bucket-B")
		})
	}
}

// BenchmarkChargeParallel charges sliding windows of 64 vendors (120 a
// minute, never full: the clock is Redis') from 16 callers a CPU, as
// concurrent requests do through the limiter's transport, and reports
// Redis' script calls, its commands (those the scripts run included) and
// its CPU a charge.
func BenchmarkChargeParallel(b *testing.B) {
	rs := testredis.Start(b)
	r := newRedisLimiter(b, rs, nil)
	rate := sliding("reads", 100000, time.Second)
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = "vg:{v:" + strconv.Itoa(i) + "}:" + rate.Name
	}
	if _, err := r.Charge(checks(policy.Check{Key: keys[0], Rate: rate})); err != nil { // the script loaded
		b.Fatal(err)
	}
	before := rs.Info(b, "cpu", "commandstats")
	b.ReportAllocs()
	b.ResetTimer()
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		for i := 0; pb.Next(); i++ {
			if _, err := r.Charge(checks(policy.Check{Key: keys[i%len(keys)], Rate: rate})); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	after := rs.Info(b, "cpu", "commandstats")
	n := float64(b.N)
	cmds := int64(0)
	for name, c := range after.Calls() {
		cmds += c - before.Calls()[name]
	}
	b.ReportMetric(float64(after.Scripts()-before.Scripts())/n, "scripts/op")
	b.ReportMetric(float64(cmds)/n, "cmds/op")
	b.ReportMetric((after.CPU()-before.CPU())*1e6/n, "redis-us/op")
}
