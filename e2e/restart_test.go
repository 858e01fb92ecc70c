package e2e

import (
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestBackendRestartUnderLoad kills the backend (SIGKILL) under a
// 32-connection load, keeps it down for about three seconds, starts it again
// on the same ports, and does so ten times: each time the gateway must answer
// 200 again within breaker_open_for + 2s of the backend's own /readyz
// answering 200. A breaker that reopens after the backend is back (a recovery
// probe sent on a pooled connection to the dead process) misses that bound.
func TestBackendRestartUnderLoad(t *testing.T) {
	// Not parallel: its recovery bound (breaker_open_for + 2s) is timed under its own load.
	const (
		iterations = 10
		workers    = 32
		down       = 3 * time.Second
		// openFor is longer than the outage, as the default 5s is: the
		// backend is back within the first open period, and no probe during
		// the outage uses up a dead pooled connection before the one that
		// counts (a 1s period sends two or three).
		openFor  = 4 * time.Second
		peakSize = 128
		// bound is the promise: one open period to wait out, then 2s.
		bound = openFor + 2*time.Second
	)
	s := newStack(t, stackOptions{redis: true,
		gatewayYAML: "limits:\n  vendor:\n    reads: {rate: 1000000, period: 1m}\nproxy:\n  breaker_open_for: " + openFor.String() + "\n",
		// A -race gateway, backend and load share two cores here: a limiter
		// call slow past 250ms would read as a Redis outage, which is not
		// what this test is about.
		gatewayEnv: map[string]string{"GATEWAY_REDIS_TIMEOUT": "1s"}})
	_, key := s.newVendor("sandbox", "mvr")
	me := s.gwURLs[0] + "/api/vendor/v1/me"

	var (
		lastOK   atomic.Int64 // UnixNano of the latest 200
		lastFail atomic.Int64 // UnixNano of the latest non-200 answer
		mark     atomic.Int64 // UnixNano after which the first 200 is recorded; 0: off
		firstOK  atomic.Int64 // UnixNano of the first 200 after mark
		failures atomic.Int64 // transport errors (the gateway itself never goes away)
		stop     = make(chan struct{})
		wg       sync.WaitGroup
	)
	// The load is bounded by its own deadline, whatever happens to the test.
	loadEnd := time.Now().Add(150 * time.Second)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			defer c.CloseIdleConnections()
			for time.Now().Before(loadEnd) {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest("GET", me, nil)
				req.Header.Set("X-API-Key", key)
				resp, err := c.Do(req)
				if err != nil {
					failures.Add(1)
					time.Sleep(10 * time.Millisecond)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				now := time.Now().UnixNano()
				if resp.StatusCode != 200 {
					lastFail.Store(now)
					// A refused request is answered at once: pause so 32
					// workers do not spin two shared cores during the outage.
					time.Sleep(20 * time.Millisecond)
					continue
				}
				lastOK.Store(now)
				if m := mark.Load(); m != 0 && now > m {
					firstOK.CompareAndSwap(0, now)
				}
			}
		}()
	}
	stopLoad := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopLoad)

	// waitFor polls cond every 10ms for up to d.
	waitFor := func(d time.Duration, cond func() bool) bool {
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			if cond() {
				return true
			}
		}
		return cond()
	}
	readyClient := &http.Client{Timeout: time.Second}
	backendReady := func() bool {
		resp, err := readyClient.Get(s.adminURL + "/readyz")
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == 200
	}

	recoveries := make([]time.Duration, 0, iterations)
	for i := range iterations {
		// Serving under load before the kill.
		since := time.Now().UnixNano()
		if !waitFor(20*time.Second, func() bool { return lastOK.Load() > since }) {
			t.Fatalf("iteration %d: no 200 under load within 20s before the kill", i+1)
		}
		// A short peak grows the gateway's backend pool past the steady
		// load's 32 connections, as any earlier peak leaves it; the load then
		// reuses them all in turn, so at the kill most sit idle in the pool.
		peak(t, me, key, peakSize)

		s.backend.killed = true
		if err := s.backend.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		<-s.backend.done
		killed := time.Now()
		time.Sleep(down)
		if lastFail.Load() < killed.UnixNano() {
			t.Fatalf("iteration %d: no refused request during the %v the backend was down", i+1, down)
		}

		firstOK.Store(0)
		mark.Store(time.Now().UnixNano())
		started := time.Now()
		s.backend = startProc(t, "backend", s.backendEnv)
		// The measurement starts when the backend says it is ready: poll its
		// own /readyz every 50ms.
		var ready time.Time
		for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			if backendReady() {
				ready = time.Now()
				break
			}
			select {
			case <-s.backend.done:
				t.Fatalf("iteration %d: the restarted backend exited:\n%s", i+1, s.backend.logText())
			default:
			}
		}
		if ready.IsZero() {
			t.Fatalf("iteration %d: the restarted backend's /readyz did not answer 200 within 30s", i+1)
		}
		// Wait past the bound, to report how long a stuck recovery took.
		if !waitFor(20*time.Second, func() bool { return firstOK.Load() != 0 }) {
			t.Fatalf("iteration %d: the gateway answered no 200 within 20s of the backend's /readyz answering 200 (bound %v)", i+1, bound)
		}
		mark.Store(0)
		rec := max(time.Duration(firstOK.Load()-ready.UnixNano()), 0)
		recoveries = append(recoveries, rec)
		t.Logf("iteration %d: /readyz 200 %v after the kill (%v after the restart), gateway 200 again %v after /readyz",
			i+1, ready.Sub(killed).Round(time.Millisecond), ready.Sub(started).Round(time.Millisecond), rec.Round(time.Millisecond))
		if rec > bound {
			t.Errorf("iteration %d: the gateway answered 200 again %v after the backend's /readyz, want within breaker_open_for + 2s = %v",
				i+1, rec.Round(time.Millisecond), bound)
		}
	}
	stopLoad()
	t.Logf("recovery after /readyz, per restart: %v (bound %v); %d transport errors", roundAll(recoveries), bound, failures.Load())
	if n := failures.Load(); n > 0 {
		t.Errorf("%d requests to the gateway failed without an HTTP answer: the gateway must answer every one", n)
	}
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

// peak sends n requests at once, each on its own connection, and waits for
// their answers (any status).
func peak(t *testing.T, url, key string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			req, _ := http.NewRequest("GET", url, nil)
			req.Header.Set("X-API-Key", key)
			<-start
			if resp, err := c.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	close(start)
	wg.Wait()
}
