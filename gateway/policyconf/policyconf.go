// Package policyconf compiles the configuration's limit rows
// (config.Policy) into policy tables (package policy): each row's rate,
// kind, calendar, scope, class, cost and shadow twin, with a vendor's
// overrides applied. One file: policyconf.go.
package policyconf

import (
	"fmt"
	"time"

	"vendorgate/config"
	"vendorgate/gateway/policy"
)

// Table compiles rows with vendor's overrides applied ("" for the
// defaults) for routes that count the classes given (policy.NewTable's).
func Table(rows []config.Policy, vendor string, classes [][]string) (*policy.Table, error) {
	ps := make([]policy.Policy, len(rows))
	for i, r := range rows {
		l := r.For(vendor)
		ps[i] = policy.Policy{Rate: rateOf(r.Name, l), Scope: scopeOf(r.Scope), Class: r.Class, Twin: twinOf(l)}
		if r.Kind == config.KindConcurrency {
			ps[i].Rate = policy.Rate{Name: r.Name, Limit: max(l.Rate, 0), Kind: policy.Concurrency} // a cap, no period
		}
		if ps[i].Valid() {
			ps[i].Cost, ps[i].Refund = int32(r.Cost), r.RefundFailures
		}
	}
	t, err := policy.NewTable(ps, classes)
	if err != nil && vendor != "" {
		err = fmt.Errorf("overrides of %s: %w", vendor, err)
	}
	return t, err
}

// OverriddenVendors are the vendors some row overrides, each once.
func OverriddenVendors(rows []config.Policy) []string {
	var vs []string
	seen := make(map[string]bool)
	for _, r := range rows {
		for v := range r.Overrides {
			if !seen[v] {
				seen[v] = true
				vs = append(vs, v)
			}
		}
	}
	return vs
}

func rateOf(name string, l config.Limit) policy.Rate {
	if !l.Enabled() {
		return policy.Rate{Name: name} // off: never checked
	}
	r := policy.Rate{Name: name, Limit: l.Rate, Burst: l.Burst, Period: l.Period, Shadow: l.Shadow}
	switch l.KindOf() {
	case config.KindWindow:
		r.Kind = policy.Sliding
	case config.KindQuota:
		r.Kind, r.Lease = policy.Quota, l.Lease
		r.Calendar = policy.Calendar{Days: uint16(l.Days), Month: l.Window == config.WindowMonth}
		if l.Window == config.WindowDay {
			r.Calendar.Days = 1
		}
		// The nominal length (the usage view's period): a month's is 31 days.
		r.Period = time.Duration(max(r.Calendar.Days, 1)) * 24 * time.Hour
		if r.Calendar.Month {
			r.Period = 31 * 24 * time.Hour
		}
	}
	return r
}

// twinOf is l's shadow twin; zero (never checked) when l has none or is
// not set itself.
func twinOf(l config.Limit) policy.Rate {
	if l.ShadowTwin == nil || !l.Enabled() {
		return policy.Rate{}
	}
	t := l.ShadowTwin
	return policy.Rate{Limit: t.Rate, Burst: t.Burst, Period: t.Period, Shadow: true}
}

func scopeOf(s string) policy.Scope {
	if s == config.ScopeKey {
		return policy.PerKey
	}
	return policy.PerVendor
}
