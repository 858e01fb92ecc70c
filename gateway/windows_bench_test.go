package gateway

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"

	"vendorgate/config"
	"vendorgate/shared/testredis"
)

// redisStats reads from INFO what Redis spent: its CPU seconds, its
// script calls (EVALSHA and EVAL: one a round trip of the limiters), and
// the bytes it read and wrote.
func redisStats(tb testing.TB, c *redis.Client) (cpu float64, scripts, in, out int64) {
	tb.Helper()
	info, err := c.Info(context.Background(), "cpu", "commandstats", "stats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	num := func(l string) int64 {
		n, _ := strconv.ParseInt(l[strings.IndexByte(l, ':')+1:], 10, 64)
		return n
	}
	for _, l := range strings.Split(info, "\r\n") {
		switch {
		case strings.HasPrefix(l, "used_cpu_user:"), strings.HasPrefix(l, "used_cpu_sys:"):
			f, _ := strconv.ParseFloat(l[strings.IndexByte(l, ':')+1:], 64)
			cpu += f
		case strings.HasPrefix(l, "cmdstat_evalsha:"), strings.HasPrefix(l, "cmdstat_eval:"):
			v := l[strings.Index(l, "calls=")+6:]
			n, _ := strconv.ParseInt(v[:strings.IndexByte(v, ',')], 10, 64)
			scripts += n
		case strings.HasPrefix(l, "total_net_input_bytes:"):
			in = num(l)
		case strings.HasPrefix(l, "total_net_output_bytes:"):
			out = num(l)
		}
	}
	return cpu, scripts, in, out
}

// BenchmarkRedisCostPerRequest measures what one proxied read costs Redis
// (its CPU, its script calls, the bytes it reads and writes, INFO's
// figures over the run: the limiters' calls, and the usage flushes and
// the prober's pings, alike in every case) under each kind of limit: the
// reads row as GCRA with the shipped leases, as GCRA without leases (every
// request asks Redis), GCRA with a daily quota beside it, and the reads
// row as a sliding window (its set holding the last 10 s of requests).
func BenchmarkRedisCostPerRequest(b *testing.B) {
	for _, tc := range []struct {
		name string
		mod  func(o *Options)
	}{
		{"gcra-leased", func(o *Options) {}},
		{"gcra-unleased", func(o *Options) { o.Config.Redis.LeaseMax = 1 }},
		{"gcra-leased+quota", func(o *Options) {
			o.Config.Limits.Policies = []config.Policy{{Name: "reads-day", Scope: config.ScopeVendor, Class: config.ClassReads,
				Limit: config.Limit{Kind: config.KindQuota, Rate: 1 << 30, Window: config.WindowDay}}}
		}},
		{"sliding", func(o *Options) {
			o.Config.Limits.Vendor.Reads = config.Limit{Kind: config.KindWindow, Rate: config.MaxWindowRate, Period: 10 * time.Second}
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			rs := testredis.Start(b)
			rig := newHandlerRig(b, func(o *Options) {
				o.DisableAccessLog = true
				o.Config.Redis.URL = config.List{rs.URL()}
				tc.mod(o)
			})
			info := redis.NewClient(&redis.Options{Addr: rs.Addr()})
			defer info.Close()
			var req fasthttp.Request
			var ctx fasthttp.RequestCtx
			for range 200 { // warm: the key cached, the script loaded
				if err := rig.read(&req, &ctx); err != nil {
					b.Fatal(err)
				}
			}
			cpu0, s0, in0, out0 := redisStats(b, info)
			b.ResetTimer()
			for range b.N {
				if err := rig.read(&req, &ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			cpu1, s1, in1, out1 := redisStats(b, info)
			n := float64(b.N)
			b.ReportMetric((cpu1-cpu0)*1e6/n, "redis-us/op")
			b.ReportMetric(float64(s1-s0)/n, "scripts/op")
			b.ReportMetric(float64(in1-in0)/n, "redis-in-B/op")
			b.ReportMetric(float64(out1-out0)/n, "redis-out-B/op")
			var mem int64
			keys, _ := info.Keys(context.Background(), "*reads*").Result()
			for _, k := range keys {
				m, _ := info.MemoryUsage(context.Background(), k).Result()
				mem += m
			}
			b.ReportMetric(float64(mem), "reads-keys-B") // the vendor's reads buckets in Redis at the end
		})
	}
}
