package outage

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"vendorgate/gateway/limit"
	"vendorgate/gateway/proxy"
)

// TestOutageCountsTheStreakItFollows: the prober sees Redis go after the
// first refusals; the line that closes the outage counts the refusals from
// the first of the streak, not those of an earlier streak nor the backend's,
// and comes after the lines beforeBack writes.
func TestOutageCountsTheStreakItFollows(t *testing.T) {
	var out bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&out, nil))
	b, err := New(log, func() { log.Info("summary") })
	if err != nil {
		t.Fatal(err)
	}
	redisDown := fmt.Errorf("limiter: %w", limit.ErrUnavailable)
	now := time.Now()
	b.CountRefusal(redisDown, now.Add(-time.Minute)) // an earlier streak
	b.CountRefusal(redisDown, now.Add(-2*time.Second))
	b.CountRefusal(redisDown, now.Add(-time.Second))
	b.CountRefusal(fmt.Errorf("backend: %w", proxy.ErrUnavailable), now)
	b.CountRefusal(errors.New("not a dependency's"), now)
	b.OnChange("redis", errors.New("dial refused"))
	b.CountRefusal(redisDown, time.Now())
	b.OnChange("redis", nil)

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 lines (gone, summary, back), got %d:\n%s", len(lines), out.String())
	}
	var gone, summary, back map[string]any
	for i, m := range []*map[string]any{&gone, &summary, &back} {
		if err := json.Unmarshal([]byte(lines[i]), m); err != nil {
			t.Fatal(err)
		}
	}
	if gone["msg"] != "dependency unavailable" || gone["dependency"] != "redis" || gone["level"] != "WARN" {
		t.Errorf("first line: %v", gone)
	}
	if summary["msg"] != "summary" {
		t.Errorf("beforeBack's line not before the outage's end: %v", summary)
	}
	if back["msg"] != "dependency available again" || back["refused_requests"] != float64(3) {
		t.Errorf("last line: want refused_requests 3 (the streak's two and one during), got %v", back)
	}
	if d, err := time.ParseDuration(fmt.Sprint(back["down_for"])); err != nil || d < 2*time.Second {
		t.Errorf("down_for %v: want it counted from the streak's first refusal, 2s or more ago", back["down_for"])
	}
}

// TestOutageBackWithoutGone: a dependency back that was never seen gone
// says so without figures.
func TestOutageBackWithoutGone(t *testing.T) {
	var out bytes.Buffer
	b, err := New(slog.New(slog.NewJSONHandler(&out, nil)), func() {})
	if err != nil {
		t.Fatal(err)
	}
	b.OnChange("backend http://127.0.0.1:1", nil)
	if s := out.String(); !strings.Contains(s, `"msg":"dependency available again"`) || strings.Contains(s, "refused_requests") {
		t.Errorf("got %s", s)
	}
}

func TestNewRefusesNil(t *testing.T) {
	if _, err := New(nil, func() {}); err == nil {
		t.Error("nil logger accepted")
	}
	if _, err := New(slog.Default(), nil); err == nil {
		t.Error("nil beforeBack accepted")
	}
}
