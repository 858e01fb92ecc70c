package config

import "time"

// The limits as -check prints them and a reload's diff lists them: each
// row with its effective values (burst = rate when unset, cost 1, the
// row's kind) and only the fields its kind has; an override with the
// values it sets, under its row's kind and window.

// limitView is one limit's effective values. Kind, window, days and
// lease are the row's; an override has none of its own.
type limitView struct {
	Kind       string        `yaml:"kind,omitempty"`
	Rate       int           `yaml:"rate"`
	Period     time.Duration `yaml:"period,omitempty"`
	Burst      int           `yaml:"burst,omitempty"`
	Window     string        `yaml:"window,omitempty"`
	Days       int           `yaml:"days,omitempty"`
	Lease      bool          `yaml:"lease,omitempty"`
	Shadow     bool          `yaml:"shadow,omitempty"`
	ShadowTwin *limitView    `yaml:"shadow_twin,omitempty"`
}

// view is l's effective values under kind (the row's); row says whether
// the kind and calendar window are l's to show.
func (l Limit) view(kind string, row bool) limitView {
	v := limitView{Rate: l.Rate, Shadow: l.Shadow}
	if row {
		v.Kind, v.Window, v.Days, v.Lease = kind, l.Window, l.Days, l.Lease
	}
	if !l.Enabled() {
		return v // off: its other fields do not apply
	}
	switch kind {
	case KindGCRA:
		v.Period, v.Burst = l.Period, l.Burst
		if v.Burst == 0 {
			v.Burst = l.Rate
		}
		if l.ShadowTwin != nil {
			t := l.ShadowTwin.view(kind, false)
			v.ShadowTwin = &t
		}
	case KindWindow:
		v.Period = l.Period
	}
	return v
}

// policyView is one row of limits.policies.
type policyView struct {
	Name           string `yaml:"name"`
	Scope          string `yaml:"scope"`
	Class          string `yaml:"class"`
	limitView      `yaml:",inline"`
	Cost           int                  `yaml:"cost,omitempty"`
	RefundFailures bool                 `yaml:"refund_failures,omitempty"`
	Overrides      map[string]limitView `yaml:"overrides,omitempty"`
}

type pairView struct {
	Reads  limitView `yaml:"reads"`
	Orders limitView `yaml:"orders"`
}

// overridePairView is a vendor's override of the built-in rows: the one it
// sets.
type overridePairView struct {
	Reads  *limitView `yaml:"reads,omitempty"`
	Orders *limitView `yaml:"orders,omitempty"`
}

type limitsView struct {
	Vendor    pairView                    `yaml:"vendor"`
	PerKey    pairView                    `yaml:"per_key"`
	Policies  []policyView                `yaml:"policies,omitempty"`
	Overrides map[string]overridePairView `yaml:"overrides,omitempty"`
}

// MarshalYAML writes the limits with their effective values (see
// limitView); what it writes loads back to the same limits.
func (l Limits) MarshalYAML() (any, error) {
	pair := func(p LimitPair) pairView {
		return pairView{Reads: p.Reads.view(p.Reads.KindOf(), true), Orders: p.Orders.view(p.Orders.KindOf(), true)}
	}
	v := limitsView{Vendor: pair(l.Vendor), PerKey: pair(l.PerKey)}
	for _, p := range l.Policies {
		v.Policies = append(v.Policies, p.view())
	}
	for vendor, o := range l.Overrides {
		if v.Overrides == nil {
			v.Overrides = make(map[string]overridePairView, len(l.Overrides))
		}
		var ov overridePairView
		if o.Reads.Enabled() {
			r := o.Reads.view(l.Vendor.Reads.KindOf(), false)
			ov.Reads = &r
		}
		if o.Orders.Enabled() {
			r := o.Orders.view(l.Vendor.Orders.KindOf(), false)
			ov.Orders = &r
		}
		v.Overrides[vendor] = ov
	}
	return v, nil
}

func (p Policy) view() policyView {
	kind := p.KindOf()
	v := policyView{Name: p.Name, Scope: p.Scope, Class: p.Class, limitView: p.Limit.view(kind, true)}
	if kind == KindGCRA && p.Enabled() {
		v.Cost, v.RefundFailures = max(p.Cost, 1), p.RefundFailures
	}
	for vendor, o := range p.Overrides {
		if v.Overrides == nil {
			v.Overrides = make(map[string]limitView, len(p.Overrides))
		}
		v.Overrides[vendor] = o.view(kind, false)
	}
	return v
}
