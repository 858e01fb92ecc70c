package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"

	"vendorgate/config"
	"vendorgate/shared/testredis"
)

// BenchmarkRedisCostPerRequest measures what one proxied read costs Redis
// (its CPU, its script calls, the bytes it reads and writes, INFO's
// figures over the run: the limiters' calls, and the usage flushes and
// the prober's pings, alike in every case) under each kind of limit: the
// reads row as GCRA with the shipped leases, as GCRA without leases (every
// request asks Redis), GCRA with a daily quota beside it (exact, and
// leased), and the reads row as a sliding window (its set holding the
// last 10 s of requests). cmds/op counts every command Redis ran, those
// the scripts run included (INFO commandstats).
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
		{"gcra-leased+leased-quota", func(o *Options) {
			o.Config.Limits.Policies = []config.Policy{{Name: "reads-day", Scope: config.ScopeVendor, Class: config.ClassReads,
				Limit: config.Limit{Kind: config.KindQuota, Rate: 1 << 30, Window: config.WindowDay, Lease: true}}}
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
			// What Redis spent, from INFO: its CPU seconds, its script
			// calls (one a round trip of the limiters), the bytes it read
			// and wrote.
			st0 := rs.Info(b, "cpu", "commandstats", "stats")
			b.ResetTimer()
			for range b.N {
				if err := rig.read(&req, &ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			st1 := rs.Info(b, "cpu", "commandstats", "stats")
			n := float64(b.N)
			moved := func(name string) float64 { a, _ := st1.Sum(name); z, _ := st0.Sum(name); return a - z }
			b.ReportMetric((st1.CPU()-st0.CPU())*1e6/n, "redis-us/op")
			b.ReportMetric(float64(st1.Scripts()-st0.Scripts())/n, "scripts/op")
			cmds := int64(0) // every command, those the scripts run included
			for name, c := range st1.Calls() {
				cmds += c - st0.Calls()[name]
			}
			b.ReportMetric(float64(cmds)/n, "cmds/op")
			b.ReportMetric(moved("total_net_input_bytes")/n, "redis-in-B/op")
			b.ReportMetric(moved("total_net_output_bytes")/n, "redis-out-B/op")
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
