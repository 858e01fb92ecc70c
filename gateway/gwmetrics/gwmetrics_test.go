package gwmetrics

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"

	"vendorgate/gateway/admin"
	"vendorgate/gateway/inflight"
	"vendorgate/gateway/throttle"
)

// value is the value of the series of name whose labels include want
// (name=value pairs), -1 when there is none.
func value(t *testing.T, m *admin.Metrics, name string, want ...string) float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, s := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range s.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(want); i += 2 {
				if have[want[i]] != want[i+1] {
					continue series
				}
			}
			switch {
			case s.GetCounter() != nil:
				return s.GetCounter().GetValue()
			case s.GetGauge() != nil:
				return s.GetGauge().GetValue()
			}
		}
	}
	return -1
}

func newHooks(t *testing.T) (*Hooks, *admin.Metrics, *bytes.Buffer) {
	t.Helper()
	var out bytes.Buffer
	m := admin.NewMetrics([]string{"unmatched"})
	h, err := New(m, slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	return h, m, &out
}

// TestBreakerStateCountedAndLogged: every transition is counted and the
// gauge follows; opening is a warning, closing an info line, a half-open
// trial only a debug line.
func TestBreakerStateCountedAndLogged(t *testing.T) {
	h, m, out := newHooks(t)
	h.BreakerState("backend", gobreaker.StateClosed, gobreaker.StateOpen)
	h.BreakerState("backend", gobreaker.StateOpen, gobreaker.StateHalfOpen)
	h.BreakerState("backend", gobreaker.StateHalfOpen, gobreaker.StateClosed)
	if n := value(t, m, "vendorgate_gateway_breaker_transitions_total", "breaker", "backend", "from", "closed", "to", "open"); n != 1 {
		t.Errorf("closed->open counted %v times", n)
	}
	if s := value(t, m, "vendorgate_gateway_breaker_state", "breaker", "backend"); s != float64(gobreaker.StateClosed) {
		t.Errorf("breaker_state %v after closing", s)
	}
	log := out.String()
	for _, want := range []string{"level=WARN msg=\"breaker opened\"", "level=DEBUG msg=\"breaker state change\"", "level=INFO msg=\"breaker closed\""} {
		if !strings.Contains(log, want) {
			t.Errorf("no %s in:\n%s", want, log)
		}
	}
}

// TestThrottleDegradedAndRestored: the gauge is 1 while the throttle counts
// in process, with one line each way.
func TestThrottleDegradedAndRestored(t *testing.T) {
	h, m, out := newHooks(t)
	h.ThrottleFallback(throttle.Fallback("unavailable"))
	h.ThrottleDegraded(throttle.Fallback("unavailable"), errors.New("dial refused"))
	if g := value(t, m, "vendorgate_gateway_failed_key_throttle_in_process"); g != 1 {
		t.Errorf("in process gauge %v while degraded", g)
	}
	h.ThrottleRestored(1500*time.Microsecond, 7)
	if g := value(t, m, "vendorgate_gateway_failed_key_throttle_in_process"); g != 0 {
		t.Errorf("in process gauge %v once restored", g)
	}
	if log := out.String(); !strings.Contains(log, "counted_in_process=7") || !strings.Contains(log, "err=\"dial refused\"") {
		t.Errorf("log:\n%s", log)
	}
}

// TestInFlightGauges: the gauges read the counter they were given, and a
// refusal is counted under its cap's label.
func TestInFlightGauges(t *testing.T) {
	h, m, _ := newHooks(t)
	in := inflight.New()
	refused, tooSlow := h.RegisterInFlight(in)
	refused[inflight.OverDownloads].Inc()
	tooSlow.Inc()
	if v := value(t, m, "vendorgate_gateway_in_flight_refused_total", "cap", "downloads"); v != 1 {
		t.Errorf("downloads refusals %v, want 1", v)
	}
	if v := value(t, m, "vendorgate_gateway_in_flight_refused_total", "cap", "requests"); v != 0 {
		t.Errorf("requests refusals %v, want 0", v)
	}
	if v := value(t, m, "vendorgate_gateway_streams_too_slow_total"); v != 1 {
		t.Errorf("streams too slow %v, want 1", v)
	}
	if _, r := in.Acquire("vendor-a", inflight.Caps{Requests: 2, Downloads: 2}, true); r != inflight.Admitted {
		t.Fatal(r)
	}
	if r, d := value(t, m, "vendorgate_gateway_in_flight_requests"), value(t, m, "vendorgate_gateway_in_flight_downloads"); r != 1 || d != 1 {
		t.Errorf("in flight %v requests, %v downloads: want the counter's 1 and 1", r, d)
	}
}

func TestNewRefusesNil(t *testing.T) {
	if _, err := New(nil, slog.Default()); err == nil {
		t.Error("nil metrics accepted")
	}
	if _, err := New(admin.NewMetrics([]string{"unmatched"}), nil); err == nil {
		t.Error("nil logger accepted")
	}
}
