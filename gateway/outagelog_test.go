package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"vendorgate/config"
	"vendorgate/shared/liblog"
	"vendorgate/shared/testlog"
	"vendorgate/shared/testredis"
	"vendorgate/shared/wire"
)

// TestRedisOutageLogShape kills the gateway's Redis under traffic and reads
// the log as a log pipeline would: every line is one JSON object with one
// "msg" key; the outage is told by its state changes (unavailable, then
// back with what it cost), not by a line per failure; each refused request
// is one access log line with its error code and the limiter's outcome.
func TestRedisOutageLogShape(t *testing.T) {
	var logs testlog.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	redis.SetLogger(liblog.Redis{Log: log}) // as cmd/gateway does
	t.Cleanup(func() { redis.SetLogger(liblog.Redis{Log: slog.New(slog.DiscardHandler)}) })
	rs := testredis.Start(t)
	b := newTestBackend(t)
	gw := startGateway(t, b, func(o *Options) {
		o.Logger = log
		o.Config.Redis.URL = config.List{rs.URL()}
		o.Config.Limits.Vendor.Reads = config.Limit{Rate: 100000, Period: time.Minute}
	})
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	me := gw.url + "/api/vendor/v1/me"
	if a := do(t, "GET", me, key); a.status != 200 {
		t.Fatalf("before the outage: %d %s", a.status, a.body)
	}
	before := len(logs.String())

	rs.Stop()
	var sent atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(3 * time.Second)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				do(t, "GET", me, key, "User-Agent", "outage-test/1")
				sent.Add(1)
			}
		}()
	}
	wg.Wait()
	rs.Restart(t)
	out := logs.WaitFor(func(s string) bool { return strings.Contains(s[before:], `"msg":"dependency available again"`) })
	lines := parseLogLines(t, []byte(out[before:]))

	var events []string
	refused := 0
	for _, l := range lines {
		msg, _ := l["msg"].(string)
		if msg == "requests refused" { // the access log's summary of the refusals past its rate
			continue
		}
		if msg == "request" {
			if l["status"] == float64(503) {
				refused++
				if l["error"] != "rate_limit_unavailable" || l["limit"] != "unavailable" || l["user_agent"] != "outage-test/1" {
					t.Errorf("a refused request's access log line: %v", l)
				}
			}
			continue
		}
		events = append(events, fmt.Sprintf("%s %s", l["level"], msg))
	}
	t.Logf("%d requests in the outage, %d refusals logged, %d other lines: %s", sent.Load(), refused, len(events), strings.Join(events, "; "))
	if sent.Load() < 20 || refused < 20 {
		t.Fatalf("the outage saw %d requests and %d refusals in the access log; want 20+ of each", sent.Load(), refused)
	}
	// Besides the access log: the dependency down and back, the breaker's
	// transitions (open, a half-open probe each breaker_open_for), a
	// failed usage flush or two.
	if len(events) > 10 {
		t.Errorf("the outage wrote %d lines besides the access log; want at most 10 (state changes, not failures)", len(events))
	}
	down, back := findMsg(lines, "dependency unavailable"), findMsg(lines, "dependency available again")
	if down == nil || down["dependency"] != "redis" {
		t.Errorf("no line says Redis became unavailable: %v", events)
	}
	if back == nil || back["dependency"] != "redis" || back["down_for"] == nil {
		t.Fatalf("no line says Redis is back with what the outage cost: %v", back)
	}
	if n, _ := back["refused_requests"].(float64); n < 20 {
		t.Errorf("the recovery line counts %v refused requests; %d refusals were logged", back["refused_requests"], refused)
	}
}

// parseLogLines decodes JSON lines, failing on a line that is not one JSON
// object or that holds a top-level key twice (log pipelines keep one).
func parseLogLines(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if k := duplicateKey(line); k != "" {
			t.Errorf("a log line holds %q twice: %s", k, line)
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Errorf("a log line is not a JSON object (%v): %s", err, line)
			continue
		}
		out = append(out, m)
	}
	return out
}

// duplicateKey returns a top-level key that appears twice in the object.
func duplicateKey(line []byte) string {
	dec := json.NewDecoder(bytes.NewReader(line))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return ""
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		k, _ := tok.(string)
		if seen[k] {
			return k
		}
		seen[k] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return ""
		}
	}
	return ""
}

func findMsg(lines []map[string]any, msg string) map[string]any {
	for _, l := range lines {
		if l["msg"] == msg {
			return l
		}
	}
	return nil
}

// TestRedisOutageRefusalsCounted stops Redis under a bounded load (4 client
// loops, 3000 requests) and reads the access log: at most
// access_log.refusals_per_second full lines of the refusal's code a
// second, the rest in "requests refused" summary lines whose counts add up
// with the full lines to every refusal; the request metric counts every
// one; and "dependency available again" counts every refusal, the ones
// made before the prober saw Redis gone included.
func TestRedisOutageRefusalsCounted(t *testing.T) {
	const perSecond, total = 20, 3000
	var logs testlog.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	redis.SetLogger(liblog.Redis{Log: log}) // as cmd/gateway does
	t.Cleanup(func() { redis.SetLogger(liblog.Redis{Log: slog.New(slog.DiscardHandler)}) })
	rs := testredis.Start(t)
	b := newTestBackend(t)
	gw := startGateway(t, b, func(o *Options) {
		o.Logger = log
		o.Config.Redis.URL = config.List{rs.URL()}
		o.Config.Limits.Vendor.Reads = config.Limit{Rate: 100000, Period: time.Minute}
		o.Config.AccessLog = config.AccessLog{RefusalsPerSecond: perSecond, SummaryInterval: time.Second}
	})
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	me := gw.url + "/api/vendor/v1/me"
	if a := do(t, "GET", me, key); a.status != 200 {
		t.Fatalf("before the outage: %d %s", a.status, a.body)
	}
	before := len(logs.String())
	const status503 = `vendorgate_gateway_requests_total{method="GET",route="/api/vendor/v1/me",status="503"}`

	rs.Stop()
	var sent, refused atomic.Int64
	var wg sync.WaitGroup
	began := time.Now()
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for sent.Add(1) <= total {
				a := do(t, "GET", me, key)
				if a.status == 503 {
					refused.Add(1)
				} else {
					t.Errorf("a request in the outage answered %d %s", a.status, a.body)
				}
			}
		}()
	}
	wg.Wait()
	seconds := int(time.Since(began)/time.Second) + 2 // the seconds the load touched, at most
	logs.WaitFor(func(s string) bool { return strings.Contains(s[before:], `"msg":"dependency unavailable"`) })
	rs.Restart(t)
	out := logs.WaitFor(func(s string) bool { return strings.Contains(s[before:], `"msg":"dependency available again"`) })
	lines := parseLogLines(t, []byte(out[before:]))

	full, summarised, summaries := 0, 0, 0
	for _, l := range lines {
		switch l["msg"] {
		case "request":
			if l["status"] == float64(503) {
				full++
			}
		case "requests refused":
			summaries++
			if l["error"] != "rate_limit_unavailable" || l["status"] != float64(503) || l["route"] != "/api/vendor/v1/me" ||
				l["first"] == nil || l["last"] == nil {
				t.Errorf("a summary line: %v", l)
			}
			n, _ := l["count"].(float64)
			summarised += int(n)
		}
	}
	n := int(refused.Load())
	t.Logf("%d refusals in %d s or less: %d full lines, %d more in %d summary lines", n, seconds, full, summarised, summaries)
	if n != total {
		t.Fatalf("%d of %d requests refused", n, total)
	}
	if full > perSecond*seconds {
		t.Errorf("%d full lines of refusals in at most %d s; want at most %d a second", full, seconds, perSecond)
	}
	if full+summarised != n {
		t.Errorf("%d full lines and %d summarised: want the %d refusals", full, summarised, n)
	}
	if got := metricValue(t, gw, status503); int(got) != n {
		t.Errorf("%s = %v, want %d", status503, got, n)
	}
	back := findMsg(lines, "dependency available again")
	if got, _ := back["refused_requests"].(float64); int(got) != n {
		t.Errorf("dependency available again counts %v refused requests, want %d: %v", back["refused_requests"], n, back)
	}
}
