package gateway

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"vendorgate/config"
	"vendorgate/shared/testredis"
)

// readyzBody is the gateway's /readyz answer.
type readyzBody struct {
	Status    string   `json:"status"`
	Unhealthy []string `json:"unhealthy"`
	Checks    []struct {
		Name   string `json:"name"`
		Status string `json:"status"`
		Reason string `json:"reason"`
	} `json:"checks"`
	Warnings []string `json:"warnings"`
}

func getReadyz(t *testing.T, gw *testGateway, query string) (int, readyzBody) {
	t.Helper()
	a := do(t, "GET", gw.admin+"/readyz"+query, "")
	var b readyzBody
	if err := json.Unmarshal(a.body, &b); err != nil {
		t.Fatalf("/readyz%s body %q: %v", query, a.body, err)
	}
	return a.status, b
}

// waitReadyz polls /readyz until it answers status naming name (when 503),
// and returns how long that took. The deadline is generous: the promise is
// 2s, a loaded -race run needs slack.
func waitReadyz(t *testing.T, gw *testGateway, status int, name string) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(10 * time.Second)
	for {
		code, b := getReadyz(t, gw, "")
		if code == status && (name == "" || contains(b.Unhealthy, name)) {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still %d %+v after 10s, want %d naming %q", code, b, status, name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitMetric polls /metrics until it has line: the readiness gauge, which
// the alerts read, follows /readyz's full form.
func waitMetric(t *testing.T, gw *testGateway, line string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(scrape(t, gw), line) {
		if time.Now().After(deadline) {
			t.Fatalf("metrics lack %s after 10s", line)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestReadyzProbesRedisWhileIdle: no vendor request at all, yet /readyz
// turns 503 naming redis soon after Redis stops, and 200 after it returns.
func TestReadyzProbesRedisWhileIdle(t *testing.T) {
	rs := testredis.Start(t)
	b := newTestBackend(t)
	gw := startGateway(t, b, func(o *Options) { o.Config.Redis.URL = config.List{rs.URL()} })
	waitReadyz(t, gw, 200, "")

	rs.Stop()
	d := waitReadyz(t, gw, 503, "redis")
	t.Logf("redis stopped: /readyz 503 after %s", d)
	waitMetric(t, gw, `vendorgate_gateway_ready{check="redis"} 0`)
	rs.Restart(t)
	d = waitReadyz(t, gw, 200, "")
	t.Logf("redis restarted: /readyz 200 after %s", d)
	waitMetric(t, gw, `vendorgate_gateway_ready{check="redis"} 1`)

	rs.Pause()
	d = waitReadyz(t, gw, 503, "redis")
	t.Logf("redis paused: /readyz 503 after %s", d)
	rs.Resume()
	d = waitReadyz(t, gw, 200, "")
	t.Logf("redis resumed: /readyz 200 after %s", d)
	if n := b.calls.Load() + b.lookups.Load(); n != 0 {
		t.Fatalf("%d vendor calls reached the backend; the test sends none", n)
	}
}

// TestReadyzProbesBackendWhileIdle: the same for the backend.
func TestReadyzProbesBackendWhileIdle(t *testing.T) {
	b := newTestBackend(t)
	gw := startGateway(t, b, nil)
	waitReadyz(t, gw, 200, "")

	b.stop()
	d := waitReadyz(t, gw, 503, "backend")
	t.Logf("backend stopped: /readyz 503 after %s", d)
	_, body := getReadyz(t, gw, "")
	if !strings.Contains(failedReason(body, "backend"), b.addr) {
		t.Fatalf("the backend check's reason does not name %s: %+v", b.addr, body)
	}
	b.restart()
	d = waitReadyz(t, gw, 200, "")
	t.Logf("backend restarted: /readyz 200 after %s", d)
	if n := b.calls.Load() + b.lookups.Load(); n != 0 {
		t.Fatalf("%d vendor calls reached the backend; the test sends none", n)
	}
	if b.probes.Load() == 0 {
		t.Fatal("the backend saw no readiness probe")
	}
}

// TestReadyzOneBackendOfTwo: the backend check holds while any backend
// answers.
func TestReadyzOneBackendOfTwo(t *testing.T) {
	b1, b2 := newTestBackend(t), newTestBackend(t)
	gw := startGateway(t, b1, func(o *Options) { o.Config.BackendURL = config.List{b1.URL(), b2.URL()} })
	waitReadyz(t, gw, 200, "")
	b1.stop()
	// Long enough for several probe rounds.
	time.Sleep(2500 * time.Millisecond)
	code, body := getReadyz(t, gw, "?verbose")
	if code != 200 || !strings.Contains(checkReason(body, "backend"), b1.addr) {
		t.Fatalf("one backend of two down: %d %+v; want 200 with the down one named", code, body)
	}
	b2.stop()
	waitReadyz(t, gw, 503, "backend")
}

func failedReason(b readyzBody, name string) string {
	for _, c := range b.Checks {
		if c.Name == name && c.Status == "failed" {
			return c.Reason
		}
	}
	return ""
}

func checkReason(b readyzBody, name string) string {
	for _, c := range b.Checks {
		if c.Name == name {
			return c.Reason
		}
	}
	return ""
}

// TestReadyzVerboseAndExclude: ?verbose lists every check with its state;
// ?exclude=NAME (repeatable) leaves a failing check out; an unknown name is
// a warning, not an error.
func TestReadyzVerboseAndExclude(t *testing.T) {
	rs := testredis.Start(t)
	b := newTestBackend(t)
	gw := startGateway(t, b, func(o *Options) { o.Config.Redis.URL = config.List{rs.URL()} })
	waitReadyz(t, gw, 200, "")

	code, body := getReadyz(t, gw, "?verbose")
	if code != 200 || body.Status != "ready" {
		t.Fatalf("verbose while ready: %d %+v", code, body)
	}
	states := map[string]string{}
	for _, c := range body.Checks {
		states[c.Name] = c.Status
	}
	for _, name := range []string{"draining", "redis", "backend"} {
		if states[name] != "ok" {
			t.Fatalf("verbose: check %s is %q, want ok: %+v", name, states[name], body)
		}
	}
	if code, body := getReadyz(t, gw, ""); code != 200 || len(body.Checks) != 0 {
		t.Fatalf("plain /readyz while ready lists checks: %d %+v", code, body)
	}

	rs.Stop()
	b.stop()
	waitReadyz(t, gw, 503, "redis")
	waitReadyz(t, gw, 503, "backend")
	for _, c := range []struct {
		query string
		want  int
	}{
		{"?exclude=redis", 503},
		{"?exclude=backend", 503},
		{"?exclude=redis&exclude=backend", 200},
		{"?exclude=backend&verbose&exclude=redis", 200},
	} {
		code, body := getReadyz(t, gw, c.query)
		if code != c.want {
			t.Fatalf("%s: %d %+v, want %d", c.query, code, body, c.want)
		}
	}
	_, body = getReadyz(t, gw, "?exclude=redis&exclude=backend&verbose")
	for _, c := range body.Checks {
		if (c.Name == "redis" || c.Name == "backend") && c.Status != "excluded" {
			t.Fatalf("excluded %s reads %q: %+v", c.Name, c.Status, body)
		}
	}
	code, body = getReadyz(t, gw, "?exclude=nosuch")
	if code != 503 || len(body.Warnings) == 0 || !strings.Contains(body.Warnings[0], "nosuch") {
		t.Fatalf("unknown exclusion: %d %+v; want 503 with a warning", code, body)
	}
	// A failing answer names its checks even without ?verbose.
	if failedReason(body, "redis") == "" {
		t.Fatalf("503 without the failing check's reason: %+v", body)
	}
	gw.g.draining.Store(true)
	if code, body := getReadyz(t, gw, "?exclude=redis&exclude=backend"); code != 503 || !contains(body.Unhealthy, "draining") {
		t.Fatalf("draining, dependencies excluded: %d %+v", code, body)
	}
}
