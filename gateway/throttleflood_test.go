package gateway

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
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

// TestKeylessFloodLeavesVendorsAlone: a flood of keyless requests (800
// keep-alive connections at once, each from a loopback address of its own,
// each address under the failed-key threshold so that every request is
// counted) at a gateway on Redis with the shipped pool and timeout, while a
// well-behaved vendor reads through the same gateway. Unauthenticated clients must not take
// the limiter from the vendor: each of its reads is answered 200, the
// limiter's breaker never opens, and the flood itself is answered 401 or
// 429, never 503. (Before the failed-key throttle had a pool of its own,
// its calls took the limiter's connections and a limiter call that could
// not get one in time counted as Redis failing: the breaker opened and
// the vendor was refused 503 rate_limit_unavailable.)
func TestKeylessFloodLeavesVendorsAlone(t *testing.T) {
	var logs testlog.Buffer
	rs := testredis.Start(t)
	b := newTestBackend(t)
	gw := startGateway(t, b, func(o *Options) {
		o.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
		o.Config.Redis.URL = config.List{rs.URL()}
		// The shipped pool and timeout (the tests' are wider for -race).
		d := config.DefaultGateway().Redis
		o.Config.Redis.Timeout, o.Config.Redis.PoolSize = d.Timeout, d.PoolSize
		o.Config.Redis.LeaseMax = 1 // every read of the vendor asks Redis
		o.Config.Limits.Vendor.Reads = config.Limit{Rate: 1_000_000, Period: time.Minute}
	})
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	me := gw.url + "/api/vendor/v1/me"
	if a := do(t, "GET", me, key); a.status != 200 {
		t.Fatalf("before the flood: %d %s", a.status, a.body)
	}

	const (
		workers  = 800
		perConn  = 50 // requests per connection: each address stays under failed_keys.per_address
		duration = 3 * time.Second
		minReads = 10 // the vendor's, however slow the flood makes them
	)
	stop := make(chan struct{})
	var floodMu sync.Mutex
	flood := map[int]int{}
	var floodErrs atomic.Int64
	var wg sync.WaitGroup
	var next atomic.Uint32
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := map[int]int{}
			defer func() {
				floodMu.Lock()
				for k, v := range local {
					flood[k] += v
				}
				floodMu.Unlock()
			}()
			for {
				select {
				case <-stop:
					return
				default:
				}
				n := next.Add(1)
				src := fmt.Sprintf("127.%d.%d.%d", 10+n/62500%200, n/250%250, 1+n%250)
				if err := keylessBurst(gw, src, perConn, stop, local); err != nil {
					floodErrs.Add(1)
				}
			}
		}()
	}

	// Whether Redis itself answered meanwhile: a client of the test's own
	// pings it every 5 ms. A vendor's read refused 503 while a ping took
	// longer than redis.timeout (Redis starved of the CPU on a loaded
	// machine: silent by the limiter's rule, which a 503 then keeps) is no
	// fault of the flood's; any other refusal is.
	slow := pingWatch(t, rs.Addr(), config.DefaultGateway().Redis.Timeout, stop)

	vendor := map[int]int{}
	var refusals []string
	excused := 0
	deadline := time.Now().Add(duration)
	for n := 0; n < minReads || time.Now().Before(deadline); n++ {
		sent := time.Now()
		a := do(t, "GET", me, key)
		if a.status == 503 && strings.Contains(string(a.body), "rate_limit_unavailable") && slow.during(sent, time.Now()) {
			excused++
			continue
		}
		vendor[a.status]++
		if a.status != 200 && len(refusals) < 5 {
			refusals = append(refusals, fmt.Sprintf("%d %s", a.status, a.body))
		}
	}
	close(stop)
	wg.Wait()
	if excused > 0 {
		t.Logf("%d of the vendor's reads refused 503 while Redis took longer than redis.timeout to answer a ping (slowest %v)", excused, slow.max())
	}

	opened := breakerOpenings(t, gw)
	t.Logf("vendor answers %v; flood answers %v (%d connection errors); limiter breaker opened %v times; throttle counted in process %v times",
		vendor, flood, floodErrs.Load(), opened, throttleLocalCount(t, gw))
	if flood[401]+flood[429] < 1000 {
		t.Fatalf("the flood was answered %v: too small to test anything", flood)
	}
	if vendor[200] == 0 || len(vendor) != 1 {
		t.Errorf("the vendor's reads were answered %v during the keyless flood, want all 200; first refusals: %s", vendor, strings.Join(refusals, "; "))
	}
	if opened != 0 {
		t.Errorf("the limiter's breaker opened %v times during a keyless flood", opened)
	}
	for st, n := range flood {
		if st != 401 && st != 429 {
			t.Errorf("the flood was answered %d %d times, want 401 or 429 only", st, n)
		}
	}
	// The throttle's state changes are logged, not its failed keys.
	var other []string
	for _, l := range parseLogLines(t, []byte(logs.String())) {
		if l["msg"] != "request" {
			other = append(other, fmt.Sprint(l["msg"]))
		}
	}
	if len(other) > 10 {
		t.Errorf("the flood wrote %d lines besides the access log, want at most 10 (state changes): %v", len(other), other[:10])
	}
}

// slowPings are the spans in which a ping of Redis took longer than a
// bound (pingWatch).
type slowPings struct {
	mu      sync.Mutex
	spans   [][2]time.Time
	slowest time.Duration
}

// pingWatch pings addr every 5 ms until stop is closed, keeping the spans
// of the pings that took longer than bound.
func pingWatch(t *testing.T, addr string, bound time.Duration, stop <-chan struct{}) *slowPings {
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	sp := &slowPings{}
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			at := time.Now()
			err := c.Ping(t.Context()).Err()
			took := time.Since(at)
			sp.mu.Lock()
			sp.slowest = max(sp.slowest, took)
			if took > bound || err != nil {
				sp.spans = append(sp.spans, [2]time.Time{at, at.Add(took)})
			}
			sp.mu.Unlock()
		}
	}()
	return sp
}

// during reports whether a slow ping overlapped [from, to].
func (sp *slowPings) during(from, to time.Time) bool {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	for _, s := range sp.spans {
		if s[0].Before(to) && s[1].After(from) {
			return true
		}
	}
	return false
}

func (sp *slowPings) max() time.Duration {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.slowest
}

// keylessBurst sends up to n keyless requests on one keep-alive connection
// from the loopback address src, counting the answers by status.
func keylessBurst(gw *testGateway, src string, n int, stop <-chan struct{}, counts map[int]int) error {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", strings.TrimPrefix(gw.url, "http://"))
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	for i := 0; i < n; i++ {
		select {
		case <-stop:
			return nil
		default:
		}
		if _, err := io.WriteString(c, "GET /api/vendor/v1/me HTTP/1.1\r\nHost: gw\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		counts[resp.StatusCode]++
	}
	return nil
}

// breakerOpenings is how often the limiter's breaker opened (from closed
// or after a half-open probe), as /metrics counts it.
func breakerOpenings(t *testing.T, gw *testGateway) float64 {
	t.Helper()
	var sum float64
	for _, l := range strings.Split(scrape(t, gw), "\n") {
		if strings.HasPrefix(l, `vendorgate_gateway_breaker_transitions_total{breaker="redis"`) && strings.Contains(l, `to="open"`) {
			var v float64
			if _, err := fmt.Sscan(l[strings.LastIndexByte(l, ' ')+1:], &v); err == nil {
				sum += v
			}
		}
	}
	return sum
}

// throttleLocalCount is the failed keys the throttle counted in process
// while its Redis was out of reach or its share of connections was in
// use, summed over reasons ("-" before the metric existed).
func throttleLocalCount(t *testing.T, gw *testGateway) string {
	t.Helper()
	var sum float64
	found := false
	for _, l := range strings.Split(scrape(t, gw), "\n") {
		if strings.HasPrefix(l, "vendorgate_gateway_failed_key_throttle_local_total") {
			var v float64
			if _, err := fmt.Sscan(l[strings.LastIndexByte(l, ' ')+1:], &v); err == nil {
				sum += v
				found = true
			}
		}
	}
	if !found {
		return "-"
	}
	return fmt.Sprint(sum)
}

// TestThrottleOutageLoggedOnce: with its Redis stopped, the failed-key
// throttle counts in process: keyless requests from three addresses are
// answered 401 up to failed_keys.per_address and 429 past it, as with
// Redis. The change is logged once (not a line per failed key), every
// failure counted in process is counted in a metric, and Redis back, the
// return is logged once.
func TestThrottleOutageLoggedOnce(t *testing.T) {
	var logs testlog.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	redis.SetLogger(liblog.Redis{Log: log}) // as cmd/gateway does
	t.Cleanup(func() { redis.SetLogger(liblog.Redis{Log: slog.New(slog.DiscardHandler)}) })
	rs := testredis.Start(t)
	b := newTestBackend(t)
	const perAddress, perClient = 5, 20
	gw := startGateway(t, b, func(o *Options) {
		o.Logger = log
		o.Config.Redis.URL = config.List{rs.URL()}
		o.Config.FailedKeys.PerAddress = perAddress
	})
	me := gw.url + "/api/vendor/v1/me"
	rs.Stop()
	for _, from := range []string{"127.0.3.1", "127.0.3.2", "127.0.3.3"} {
		c := clientFrom(from)
		for i := 0; i < perClient; i++ {
			want := 401
			if i >= perAddress {
				want = 429
			}
			if st := statusFrom(t, c, me, ""); st != want {
				t.Fatalf("keyless request %d from %s, Redis stopped: %d, want %d", i+1, from, st, want)
			}
		}
	}
	// Each address's failures up to the first 429 are counted; the rest are
	// answered from the memory of addresses over their threshold.
	counted := 3 * (perAddress + 1)
	if n := metricValue(t, gw, `vendorgate_gateway_failed_key_throttle_local_total{reason="error"}`); n != float64(counted) {
		t.Errorf("the metric counts %v failures counted in process, want %d", n, counted)
	}
	if n := metricValue(t, gw, "vendorgate_gateway_failed_key_throttle_in_process"); n != 1 {
		t.Errorf("the in-process gauge is %v while Redis is stopped, want 1", n)
	}
	lines := parseLogLines(t, []byte(logs.String()))
	if n := countMsg(lines, "failed-key throttle counting in process"); n != 1 {
		t.Errorf("%d lines say the throttle counts in process, want 1", n)
	}
	if n := countMsg(lines, "failed-key throttle unavailable"); n != 0 {
		t.Errorf("%d lines per failed key, want none", n)
	}
	if l := findMsg(lines, "failed-key throttle counting in process"); l == nil || l["reason"] != "error" || l["err"] == nil || l["level"] != "WARN" {
		t.Errorf("the line that says the throttle counts in process: %v", l)
	}

	rs.Restart(t)
	// Failed keys from fresh addresses until Redis has counted a whole hold
	// (redis.breaker_open_for) after the last fallback: then the return is
	// logged, once.
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; countMsg(parseLogLines(t, []byte(logs.String())), "failed-key throttle counting in redis again") == 0; i++ {
		if time.Now().After(deadline) {
			t.Fatal("no line says the throttle counts in Redis again, 10s after Redis came back")
		}
		if st := statusFrom(t, clientFrom(fmt.Sprintf("127.0.4.%d", 1+i%250)), me, ""); st != 401 {
			t.Fatalf("a first failed key after Redis came back: %d, want 401", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
	lines = parseLogLines(t, []byte(logs.String()))
	back := findMsg(lines, "failed-key throttle counting in redis again")
	if n, _ := back["counted_in_process"].(float64); n < float64(counted) || back["in_process_for"] == nil || countMsg(lines, "failed-key throttle counting in redis again") != 1 {
		t.Errorf("the line that says the throttle counts in Redis again: %v (want it once, counting at least %d)", back, counted)
	}
	if n := metricValue(t, gw, "vendorgate_gateway_failed_key_throttle_in_process"); n != 0 {
		t.Errorf("the in-process gauge is %v with Redis back, want 0", n)
	}
}

func countMsg(lines []map[string]any, msg string) int {
	n := 0
	for _, l := range lines {
		if l["msg"] == msg {
			n++
		}
	}
	return n
}
