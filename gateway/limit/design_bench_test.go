package limit

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"vendorgate/gateway/policy"
	"vendorgate/shared/testredis"
)

// BenchmarkLimiterDesigns compares, against one real Redis with 64
// concurrent callers over 10,000 vendors, the two ways of sharing round
// trips: our batcher (one script call per batch) and go-redis's
// experimental AutoPipeline (commands coalesced, one script call per
// limiter call). It reports Redis's CPU and its script calls per call.
func BenchmarkLimiterDesigns(b *testing.B) {
	rs := testredis.Start(b)
	keys := make([]string, 10000)
	for i := range keys {
		keys[i] = "vg:{v:" + strconv.Itoa(i) + "}:reads"
	}
	rate := policy.Rate{Name: "reads", Limit: 1 << 30, Period: time.Minute}
	run := func(b *testing.B, allow func(cs policy.Checks) error) {
		var next atomic.Uint64
		// Redis's own CPU seconds and script calls, per limiter call.
		st0 := rs.Info(b, "cpu", "commandstats")
		b.SetParallelism(32) // 64 callers on 2 cores
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := allow(one(keys[next.Add(1)%uint64(len(keys))], rate)); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.StopTimer()
		st1 := rs.Info(b, "cpu", "commandstats")
		b.ReportMetric((st1.CPU()-st0.CPU())*1e6/float64(b.N), "redis-us/op")
		b.ReportMetric(float64(st1.Scripts()-st0.Scripts())/float64(b.N), "scripts/op")
	}
	for _, lease := range []int{1, 16} {
		name := "batch-script"
		if lease > 1 {
			name = "batch-script-leased"
		}
		b.Run(name, func(b *testing.B) {
			c := redis.NewClient(&redis.Options{Addr: rs.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true, PoolSize: 64})
			defer c.Close()
			var charged atomic.Int64
			r, err := NewRedis(withDefaults(RedisOptions{Client: c, Timeout: time.Second, Pipeline: true, LeaseMax: lease,
				OnCharged: func(n int) { charged.Add(int64(n)) }}))
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			run(b, func(cs policy.Checks) error { _, err := r.Allow(cs); return err })
			b.ReportMetric(float64(charged.Load())/float64(b.N), "charged/op")
		})
	}
	b.Run("go-redis-autopipeline", func(b *testing.B) {
		c := redis.NewClient(&redis.Options{Addr: rs.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true, PoolSize: 64})
		defer c.Close()
		ap, err := c.AutoPipeline()
		if err != nil {
			b.Fatal(err)
		}
		if err := gcraScript.Load(context.Background(), c).Err(); err != nil {
			b.Fatal(err)
		}
		run(b, func(cs policy.Checks) error {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			c := cs.List[0]
			args := make([]any, 5)
			args[0] = 1
			setArgs(args[1:], c.Rate, 1)
			_, err := gcraScript.EvalSha(ctx, ap, []string{keyPrefix + c.Key}, args...).Slice()
			return err
		})
	})
}
