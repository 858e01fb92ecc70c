package gateway

import (
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"vendorgate/config"
	"vendorgate/shared/apierr"
	"vendorgate/shared/testlog"
	"vendorgate/shared/wire"
)

// TestRefusalsNamed: a request refused by each kind of limit (a quota, a
// sliding window, a GCRA limit, an in-flight cap, a concurrency policy),
// in process and on Redis, is answered 429 rate_limited with a message
// naming the limit, what it allows and when to retry (in step with
// Retry-After), logged with "limit":"limited" and a policy field naming
// it, and counted under its name in the refusal metric.
func TestRefusalsNamed(t *testing.T) {
	generous := config.Limit{Rate: 10000, Period: time.Minute}
	cases := []struct {
		name    string
		mod     func(*Options)
		refuse  func(t *testing.T, gw *testGateway, key string) answer
		policy  string // the access log's policy field and the message's first word
		allows  string // what the message says the limit allows
		retry   time.Duration
		metric  string
		stepped bool // Retry-After is a whole unit of the limit (no sub-minute rounding)
	}{{
		name: "quota",
		mod: func(o *Options) {
			o.Config.Limits.Vendor.Orders = generous
			o.Config.Limits.Policies = []config.Policy{{Name: "orders-day", Scope: config.ScopeVendor, Class: config.ClassOrders,
				Limit: config.Limit{Kind: config.KindQuota, Rate: 1, Window: config.WindowDay}}}
		},
		refuse: func(t *testing.T, gw *testGateway, key string) answer {
			return doTwice(t, "POST", gw.url+"/api/vendor/v1/orders", key)
		},
		policy: "orders-day", allows: "1 a day",
		metric: `vendorgate_gateway_limiter_decisions_total{limit="orders-day",outcome="limited"}`,
	}, {
		name: "window",
		mod: func(o *Options) {
			o.Config.Limits.Vendor.Reads = generous
			o.Config.Limits.Policies = []config.Policy{{Name: "reads-hour", Scope: config.ScopeVendor, Class: config.ClassReads,
				Limit: config.Limit{Kind: config.KindWindow, Rate: 1, Period: time.Hour}}}
		},
		refuse: func(t *testing.T, gw *testGateway, key string) answer {
			return doTwice(t, "GET", gw.url+"/api/vendor/v1/me", key)
		},
		policy: "reads-hour", allows: "1 an hour",
		metric: `vendorgate_gateway_limiter_decisions_total{limit="reads-hour",outcome="limited"}`,
	}, {
		name: "gcra",
		mod: func(o *Options) {
			o.Config.Limits.Vendor.Reads = config.Limit{Rate: 1, Period: time.Minute, Burst: 1}
		},
		refuse: func(t *testing.T, gw *testGateway, key string) answer {
			return doTwice(t, "GET", gw.url+"/api/vendor/v1/me", key)
		},
		policy: "reads", allows: "1 a minute",
		metric: `vendorgate_gateway_limiter_decisions_total{limit="reads",outcome="limited"}`,
	}, {
		name: "in-flight",
		mod: func(o *Options) {
			o.Config.Limits.Vendor.Reads = generous
			o.Config.InFlight.Requests, o.Config.InFlight.Downloads = 1, 1
			o.Config.Proxy.StreamMinRate = 0
		},
		refuse: func(t *testing.T, gw *testGateway, key string) answer {
			if h := holdDownload(t, gw.url+reportPath, key); h.status != 200 {
				t.Fatalf("the held download: %d %s", h.status, h.body)
			}
			return do(t, "GET", gw.url+"/api/vendor/v1/me", key)
		},
		policy: "in_flight.requests", allows: "1 request in flight at once at this gateway", retry: time.Second, stepped: true,
		metric: `vendorgate_gateway_in_flight_refused_total{cap="requests"}`,
	}, {
		name: "concurrency",
		mod: func(o *Options) {
			o.Config.Limits.Vendor.Reads = generous
			o.Config.Limits.Policies = []config.Policy{downloadsAtOnce(1)}
			o.Config.Proxy.StreamMinRate = 0
		},
		refuse: func(t *testing.T, gw *testGateway, key string) answer {
			if h := holdDownload(t, gw.url+reportPath, key); h.status != 200 {
				t.Fatalf("the held download: %d %s", h.status, h.body)
			}
			h := holdDownload(t, gw.url+reportPath, key)
			a := answer{status: h.status, header: h.header, body: h.body}
			a.env, a.isEnv = apierr.Parse(h.body)
			return a
		},
		policy: "downloads-at-once", allows: "1 in flight at once", retry: time.Second, stepped: true,
		metric: `vendorgate_gateway_limiter_decisions_total{limit="downloads-at-once",outcome="limited"}`,
	}}
	limiterModes(t, func(t *testing.T, withRedis func(*Options)) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				var logs testlog.Buffer
				b := newTestBackend(t)
				bigReport(b, 16<<20)
				gw := startGateway(t, b, func(o *Options) {
					withRedis(o)
					o.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
					tc.mod(o)
				})
				key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
				a := tc.refuse(t, gw, key)
				a.wantError(t, 429, apierr.RateLimited)
				ra := retryAfter(t, a)
				prefix := tc.policy + ": " + tc.allows + "; retry in "
				if msg := a.env.Message; !strings.HasPrefix(msg, prefix) {
					t.Errorf("message %q, want it to begin %q", msg, prefix)
				} else if in, err := time.ParseDuration(strings.ReplaceAll(msg[len(prefix):], " ", "")); err != nil {
					t.Errorf("message %q: the retry time does not read as a duration: %v", msg, err)
				} else if d := time.Duration(ra)*time.Second - in; d < 0 || d >= time.Minute || tc.stepped && d != 0 || tc.retry != 0 && in != tc.retry {
					// The message rounds down to the unit it shows (minutes
					// past an hour, seconds below); Retry-After is whole
					// seconds.
					t.Errorf("message %q says retry in %v, Retry-After %d s", msg, in, ra)
				}
				line := refusedLine(t, &logs, a.header.Get(wire.HeaderRequestID))
				if line["limit"] != "limited" || line["policy"] != tc.policy {
					t.Errorf("access log line %v: want limit limited, policy %s", line, tc.policy)
				}
				if m := metricValue(t, gw, tc.metric); m != 1 {
					t.Errorf("%s = %v, want 1", tc.metric, m)
				}
			})
		}
	})
}

// doTwice sends the same request twice, the first admitted, and returns
// the second's answer.
func doTwice(t *testing.T, method, url, key string) answer {
	t.Helper()
	if a := do(t, method, url, key); a.status != 200 {
		t.Fatalf("the first %s: %d %s", method, a.status, a.body)
	}
	return do(t, method, url, key)
}

// refusedLine waits for the access log line of request id rid and returns
// its fields.
func refusedLine(t *testing.T, logs *testlog.Buffer, rid string) map[string]any {
	t.Helper()
	var found map[string]any
	logs.WaitFor(func(log string) bool {
		for _, l := range strings.Split(log, "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "request" && m["request_id"] == rid {
				found = m
				return true
			}
		}
		return false
	})
	if found == nil {
		t.Fatalf("no access log line of request %s", rid)
	}
	if s, _ := found["status"].(float64); strconv.Itoa(int(s)) != "429" {
		t.Fatalf("access log line %v: want status 429", found)
	}
	return found
}
