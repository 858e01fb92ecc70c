package admission

import (
	"errors"
	"testing"
	"time"

	"vendorgate/gateway/concurrency"
	"vendorgate/gateway/inflight"
	"vendorgate/gateway/limit"
	"vendorgate/gateway/policy"
	"vendorgate/gateway/window"
)

// rig is an Admitter over the in-process limiters of every kind, on one
// fixed clock, and a table of one route counting rows.
type rig struct {
	ad      *Admitter
	windows *window.Local
	flight  *inflight.Counter
	table   *policy.Table
	buckets *policy.Buckets
}

func newRig(t *testing.T, rows ...policy.Policy) *rig {
	t.Helper()
	now := time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	table, err := policy.NewTable(rows, [][]string{{"orders"}})
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{windows: window.NewLocal(clock), flight: inflight.New(), table: table,
		buckets: policy.NewLayout(rows, nil).Buckets("vendor-a", "key-1")}
	if r.ad, err = New(r.windows, limit.NewLocal(limit.LocalOptions{Now: clock}), r.flight, concurrency.NewLocal()); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *rig) admit(caps inflight.Caps) (*Admission, error) {
	a := new(Admission)
	return a, r.ad.Admit(a, &Request{Table: r.table, Buckets: r.buckets, Vendor: "vendor-a", Caps: caps})
}

// used is what row's quota or window holds.
func (r *rig) used(t *testing.T, row int) int {
	t.Helper()
	n, _, _, err := r.windows.Used(r.buckets.Name(row).Key, r.table.Policies[row].Rate)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func quota(name string, n int) policy.Policy {
	return policy.Policy{Rate: policy.Rate{Name: name, Limit: n, Period: 24 * time.Hour, Kind: policy.Quota, Calendar: policy.Calendar{Days: 1}}, Class: "orders"}
}

func gcra(name string, n int, per time.Duration) policy.Policy {
	return policy.Policy{Rate: policy.Rate{Name: name, Limit: n, Burst: n, Period: per}, Class: "orders"}
}

func atOnce(name string, n int) policy.Policy {
	return policy.Policy{Rate: policy.Rate{Name: name, Limit: n, Kind: policy.Concurrency}, Class: "orders"}
}

// A refusal by any kind after the quota charged gives the quota's charge
// back, and the slots taken before it: a request is charged by every
// limit or by none. The refusal names its kind and row.
func TestRefusalGivesBackWhatOthersCharged(t *testing.T) {
	r := newRig(t, quota("orders-day", 10), gcra("orders", 4, time.Minute), atOnce("at-once", 1))
	caps := inflight.Caps{Requests: 10, Downloads: 10}
	first, err := r.admit(caps)
	if err != nil || first.Slot == nil || !first.Decided || first.Windows == nil || !first.Windows.Decided {
		t.Fatalf("first: %v, %+v", err, first.Refused)
	}
	if u := r.used(t, 0); u != 1 {
		t.Fatalf("quota used %d after one admitted", u)
	}

	// The concurrency policy is at its cap: refused last, after the quota,
	// the GCRA limit and the in-flight slot; the quota and the slot go back.
	second, err := r.admit(caps)
	if !errors.Is(err, ErrRefused) || second.Refused.Kind != Slots || second.Refused.Name != "at-once" || second.Refused.Policy != 2 {
		t.Fatalf("second: %v, %+v", err, second.Refused)
	}
	if u := r.used(t, 0); u != 1 {
		t.Fatalf("quota used %d after a refusal by the concurrency policy, want 1", u)
	}
	if n, _ := r.flight.InFlight("vendor-a"); n != 1 || second.Slot != nil {
		t.Fatalf("%d in flight after a refusal by the concurrency policy (slot %v), want the first's only", n, second.Slot)
	}

	// The in-flight cap refuses (one held, cap 1): the quota goes back.
	third, err := r.admit(inflight.Caps{Requests: 1, Downloads: 1})
	if !errors.Is(err, ErrRefused) || third.Refused.Kind != InFlight || third.Refused.Name != "in_flight.requests" || third.Refused.Cap != 1 {
		t.Fatalf("third: %v, %+v", err, third.Refused)
	}
	if u := r.used(t, 0); u != 1 {
		t.Fatalf("quota used %d after a refusal by the in-flight cap, want 1", u)
	}

	// The GCRA limit refuses (4 a minute: three charged above, as the
	// tokens of a request refused after them stand, one more here after
	// the first's release): the quota goes back, no slot held.
	first.Release()
	if _, err := r.admit(caps); err != nil {
		t.Fatalf("after the release: %v", err)
	}
	fourth, err := r.admit(caps)
	if !errors.Is(err, ErrRefused) || fourth.Refused.Kind != Rates || fourth.Refused.Name != "orders" || fourth.Refused.RetryAfter <= 0 {
		t.Fatalf("fourth: %v, %+v", err, fourth.Refused)
	}
	if u := r.used(t, 0); u != 2 {
		t.Fatalf("quota used %d after two admitted and a GCRA refusal, want 2", u)
	}
	if o := fourth.Outcome(); o != "limited" {
		t.Fatalf("outcome %q", o)
	}
}

// The quota refuses first: nothing after it is asked.
func TestQuotaRefusesFirst(t *testing.T) {
	r := newRig(t, quota("orders-day", 1), gcra("orders", 100, time.Minute))
	caps := inflight.Caps{Requests: 10, Downloads: 10}
	a, err := r.admit(caps)
	if err != nil {
		t.Fatal(err)
	}
	a.Release()
	b, err := r.admit(caps)
	if !errors.Is(err, ErrRefused) || b.Refused.Kind != Windows || b.Refused.Name != "orders-day" || b.Decided || b.Slot != nil {
		t.Fatalf("%v, %+v (GCRA decided %v)", err, b.Refused, b.Decided)
	}
	want := "orders-day: 1 a day; retry in 12h"
	if m := b.Refused.Message(); m != want {
		t.Fatalf("message %q, want %q", m, want)
	}
}

func TestMessage(t *testing.T) {
	for _, tc := range []struct {
		r    Refusal
		want string
	}{
		{Refusal{Kind: Windows, Name: "orders-day", Rate: quota("", 1000).Rate, RetryAfter: 22*time.Hour + 21*time.Minute + 30*time.Second},
			"orders-day: 1000 a day; retry in 22h 21m"},
		{Refusal{Kind: Windows, Name: "orders-month", Rate: policy.Rate{Limit: 5, Kind: policy.Quota, Calendar: policy.Calendar{Month: true}}, RetryAfter: 3 * time.Hour},
			"orders-month: 5 a month; retry in 3h"},
		{Refusal{Kind: Windows, Name: "week", Rate: policy.Rate{Limit: 5, Kind: policy.Quota, Calendar: policy.Calendar{Days: 7}}, RetryAfter: 61 * time.Second},
			"week: 5 every 7 days; retry in 1m 1s"},
		{Refusal{Kind: Windows, Name: "reads-hour", Rate: policy.Rate{Limit: 15, Period: time.Hour, Kind: policy.Sliding}, RetryAfter: 1500 * time.Millisecond},
			"reads-hour: 15 an hour; retry in 2s"},
		{Refusal{Kind: Rates, Name: "reads", Rate: gcra("", 120, time.Minute).Rate, RetryAfter: 300 * time.Millisecond},
			"reads: 120 a minute; retry in 1s"},
		{Refusal{Kind: Rates, Name: "burst", Rate: gcra("", 10, 90*time.Second).Rate, RetryAfter: 9 * time.Second},
			"burst: 10 every 1m 30s; retry in 9s"},
		{inFlightRefusal(inflight.OverRequests, inflight.Caps{Requests: 64, Downloads: 8}),
			"in_flight.requests: 64 requests in flight at once at this gateway; retry in 1s"},
		{inFlightRefusal(inflight.OverDownloads, inflight.Caps{Requests: 64, Downloads: 1}),
			"in_flight.downloads: 1 download in flight at once at this gateway; retry in 1s"},
		{slotRefusal("downloads-at-once", 3, 4), "downloads-at-once: 4 in flight at once; retry in 1s"},
	} {
		if m := tc.r.Message(); m != tc.want {
			t.Errorf("%q, want %q", m, tc.want)
		}
	}
}

// An admission of a route without windows allocates nothing.
func TestAdmitAllocs(t *testing.T) {
	r := newRig(t, gcra("orders", 1<<30, time.Second))
	caps := inflight.Caps{Requests: 10, Downloads: 10}
	var a Admission
	req := Request{Table: r.table, Buckets: r.buckets, Vendor: "vendor-a", Caps: caps}
	if n := testing.AllocsPerRun(1000, func() {
		a = Admission{}
		if err := r.ad.Admit(&a, &req); err != nil {
			t.Fatal(err)
		}
		a.Release()
	}); n != 0 {
		t.Fatalf("%.1f allocations an admission", n)
	}
}
