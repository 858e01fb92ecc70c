package admission

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"vendorgate/gateway/admin"
	"vendorgate/gateway/auth"
	"vendorgate/gateway/inflight"
	"vendorgate/gateway/limit"
	"vendorgate/gateway/policy"
	"vendorgate/shared/testlog"
)

// fixture is Books over fresh metrics, with two policy rows ("a" and
// "b") and their decision counters.
type fixture struct {
	books     Books
	metrics   *admin.Metrics
	decisions []*admin.Decisions
	refused   [inflight.OverDownloads + 1]prometheus.Counter
	logs      *testlog.Buffer
}

func newFixture() *fixture {
	f := &fixture{metrics: admin.NewMetrics([]string{"unmatched"}), logs: &testlog.Buffer{}}
	f.decisions = []*admin.Decisions{f.metrics.Decisions("a"), f.metrics.Decisions("b")}
	for i := range f.refused {
		f.refused[i] = prometheus.NewCounter(prometheus.CounterOpts{Name: "refused"})
	}
	f.books = NewBooks(slog.New(slog.NewTextHandler(f.logs, nil)), f.refused)
	return f
}

// count is the decisions counted for limit and outcome.
func (f *fixture) count(t *testing.T, limit, outcome string) float64 {
	t.Helper()
	families, err := f.metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != "vendorgate_gateway_limiter_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["limit"] == limit && labels["outcome"] == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func value(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func rate(name string, shadow bool) policy.Rate {
	return policy.Rate{Name: name, Limit: 1, Period: 1e9, Shadow: shadow}
}

// TestLimits: each decided check counts its outcome once, a shadow refusal
// is logged and counted shadow_limited, a limiter failure counts every
// check but a twin unavailable, and a request shed counts nothing.
func TestLimits(t *testing.T) {
	id := &auth.Identity{VendorID: "v1", KeyID: "k1"}
	t.Run("decided", func(t *testing.T) {
		f := newFixture()
		a := Admission{Decided: true}
		a.Checks.Add(policy.Check{Rate: rate("a", false), Policy: 0})
		a.Checks.Add(policy.Check{Rate: rate("b", true), Policy: 1})
		a.Decision.Results[0] = limit.Result{Known: true, Allowed: false}
		a.Decision.Results[1] = limit.Result{Known: true, Allowed: false}
		f.books.Admission(f.decisions, id, &a, nil)
		if n := f.count(t, "a", "limited"); n != 1 {
			t.Errorf("a limited %v, want 1", n)
		}
		if n := f.count(t, "b", "shadow_limited"); n != 1 {
			t.Errorf("b shadow_limited %v, want 1", n)
		}
		if !strings.Contains(f.logs.String(), "shadow limit would refuse") || !strings.Contains(f.logs.String(), "vendor_id=v1") {
			t.Errorf("no shadow line naming the vendor: %s", f.logs.String())
		}
	})
	t.Run("failed", func(t *testing.T) {
		f := newFixture()
		a := Admission{RatesErr: errors.New("redis down")}
		a.Checks.Add(policy.Check{Rate: rate("a", false), Policy: 0})
		a.Checks.Add(policy.Check{Rate: rate("a", true), Policy: 0, Twin: true})
		f.books.Admission(f.decisions, id, &a, nil)
		if n := f.count(t, "a", "unavailable"); n != 1 {
			t.Errorf("a unavailable %v, want 1 (the twin not counted)", n)
		}
	})
	t.Run("shed", func(t *testing.T) {
		f := newFixture()
		a := Admission{RatesErr: limit.ErrBusy}
		a.Checks.Add(policy.Check{Rate: rate("a", false), Policy: 0})
		f.books.Admission(f.decisions, id, &a, nil)
		if n := f.count(t, "a", "unavailable"); n != 0 {
			t.Errorf("a shed request counted unavailable %v times", n)
		}
	})
}

// TestInFlightRefusal: a refusal by an in-flight cap counts by the cap
// that refused, and no limit's decision.
func TestInFlightRefusal(t *testing.T) {
	f := newFixture()
	a := Admission{Refused: Refusal{Kind: InFlight, InFlight: inflight.OverDownloads, Policy: -1}}
	f.books.Admission(f.decisions, &auth.Identity{}, &a, nil)
	if n := value(t, f.refused[inflight.OverDownloads]); n != 1 {
		t.Fatalf("refused by the downloads cap %v, want 1", n)
	}
	for i, c := range f.refused {
		if i != int(inflight.OverDownloads) && value(t, c) != 0 {
			t.Fatalf("cap %d counted a refusal it did not make", i)
		}
	}
}
