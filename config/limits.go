package config

import (
	"fmt"
	"time"
)

// Limit is one rate limit: Rate requests per Period with a burst of Burst
// (default Rate). Shadow counts and logs denials but never refuses.
// ShadowTwin, when set, is a second limit evaluated beside this one on its
// own bucket and never enforced: its would-be refusals are counted (the
// usage view, metrics) and logged, so that a tighter limit can be tried on
// live traffic before it is enforced.
type Limit struct {
	Rate       int           `yaml:"rate"`
	Period     time.Duration `yaml:"period"`
	Burst      int           `yaml:"burst"`
	Shadow     bool          `yaml:"shadow"`
	ShadowTwin *Limit        `yaml:"shadow_twin"`
}

// Enabled reports whether l is set.
func (l Limit) Enabled() bool { return l.Rate > 0 }

func (l Limit) validate(name string) error {
	if !l.Enabled() {
		return nil
	}
	if l.Period <= 0 {
		return fmt.Errorf("%s.period must be positive (for example 1m)", name)
	}
	if l.Burst < 0 {
		return fmt.Errorf("%s.burst must not be negative", name)
	}
	if t := l.ShadowTwin; t != nil {
		switch {
		case !t.Enabled():
			return fmt.Errorf("%s.shadow_twin.rate must be positive (or leave shadow_twin out)", name)
		case t.ShadowTwin != nil || t.Shadow:
			return fmt.Errorf("%s.shadow_twin is always shadow and has no twin of its own: remove its shadow and shadow_twin", name)
		}
		return t.validate(name + ".shadow_twin")
	}
	return nil
}

// LimitPair is the reads and orders limits of one scope.
type LimitPair struct {
	Reads  Limit `yaml:"reads"`
	Orders Limit `yaml:"orders"`
}

// The scopes of a policy: whose requests share its bucket.
const (
	// ScopeVendor: every key of the vendor, on every gateway replica.
	ScopeVendor = "vendor"
	// ScopeKey: one key.
	ScopeKey = "key"
)

// The route classes the built-in policies count; the gateway's routes
// name the classes they count against, and a policy row may name any of
// them.
const (
	ClassReads  = "reads"
	ClassOrders = "orders"
)

// Policy is one row of the limit policy table: its name (the
// RateLimit-Policy name, the usage view's and the metrics' label), its
// scope, the class of routes it counts, its limit (rate, period, burst,
// shadow flag and shadow twin), and the vendors with a limit of their own
// under it. A row whose rate is 0 is off, and keeps its place. How many
// rows and limits per request fit is the gateway's to say (its table's
// capacity); it refuses a table past it at start and on reload.
type Policy struct {
	Name  string `yaml:"name"`
	Scope string `yaml:"scope"` // ScopeVendor or ScopeKey
	Class string `yaml:"class"` // the routes it counts, e.g. ClassReads
	Limit `yaml:",inline"`
	// Overrides replace the limit for a vendor, by vendor id.
	Overrides map[string]Limit `yaml:"overrides"`
	// Cost is how many tokens of the row's limit one request takes (its
	// rate and burst count tokens); 0 or 1: one. Only on the rows of
	// limits.policies: the specification's rows count requests. At most
	// the burst (of the limit, each override and the shadow twin).
	Cost int `yaml:"cost"`
	// RefundFailures gives a request's tokens back when the backend
	// answered 5xx or the gateway answered 504 for it (never for a 503 the
	// gateway makes itself), within a cap per bucket at each gateway.
	RefundFailures bool `yaml:"refund_failures"`

	path string // where the row is written, for messages
}

// Limits are the request limits: the policy table. Vendor and PerKey are
// the table's first four rows (reads, orders, key-reads, key-orders),
// written as they always were; Policies are further rows. Overrides replace
// a vendor's reads and orders limits by vendor id (a row of Policies
// carries its own).
type Limits struct {
	Vendor    LimitPair            `yaml:"vendor"`
	PerKey    LimitPair            `yaml:"per_key"`
	Policies  []Policy             `yaml:"policies"`
	Overrides map[string]LimitPair `yaml:"overrides"`
}

// defaultLimits: reads 120 a minute and orders 10 a minute per vendor, the
// specification's limits; no per-key limits.
func defaultLimits() Limits {
	return Limits{Vendor: LimitPair{
		Reads:  Limit{Rate: 120, Period: time.Minute},
		Orders: Limit{Rate: 10, Period: time.Minute},
	}}
}

// Rows is the policy table: reads, orders, key-reads and key-orders from
// Vendor, PerKey and Overrides, then Policies. A row's index is its place
// here; rows are appended, never reordered, so that usage counted under an
// index keeps its name.
func (l Limits) Rows() []Policy {
	rows := make([]Policy, 0, 4+len(l.Policies))
	builtin := func(name, scope, class string, lim Limit, path string, override func(LimitPair) Limit) {
		p := Policy{Name: name, Scope: scope, Class: class, Limit: lim, path: path}
		for v, o := range l.Overrides {
			if o := override(o); o.Enabled() {
				if p.Overrides == nil {
					p.Overrides = make(map[string]Limit)
				}
				p.Overrides[v] = o
			}
		}
		rows = append(rows, p)
	}
	none := func(LimitPair) Limit { return Limit{} }
	builtin("reads", ScopeVendor, ClassReads, l.Vendor.Reads, "limits.vendor.reads", func(o LimitPair) Limit { return o.Reads })
	builtin("orders", ScopeVendor, ClassOrders, l.Vendor.Orders, "limits.vendor.orders", func(o LimitPair) Limit { return o.Orders })
	builtin("key-reads", ScopeKey, ClassReads, l.PerKey.Reads, "limits.per_key.reads", none)
	builtin("key-orders", ScopeKey, ClassOrders, l.PerKey.Orders, "limits.per_key.orders", none)
	for i, p := range l.Policies {
		p.path = fmt.Sprintf("limits.policies[%d]", i)
		rows = append(rows, p)
	}
	return rows
}

// Path is where the row is written in the configuration, for messages.
func (p Policy) Path() string { return p.path }

// For returns the row's limit for vendor: its override, or the row's own.
func (p Policy) For(vendor string) Limit {
	if o, ok := p.Overrides[vendor]; ok {
		return o
	}
	return p.Limit
}

// validate checks every row: the one place a policy's settings are
// checked.
func (l Limits) validate() []error {
	var errs []error
	for vendor, o := range l.Overrides {
		for name, lim := range map[string]Limit{"reads": o.Reads, "orders": o.Orders} {
			if err := lim.validate("limits.overrides." + vendor + "." + name); err != nil {
				errs = append(errs, err)
			}
		}
	}
	rows := l.Rows()
	seen := make(map[string]bool, len(rows))
	for i, p := range rows {
		if err := p.Limit.validate(p.path); err != nil {
			errs = append(errs, err)
		}
		if i < 4 {
			// The built-in rows: their name, scope and class are fixed,
			// their overrides were checked above.
			seen[p.Name] = true
			continue
		}
		switch {
		case p.Name == "" || !validName(p.Name):
			errs = append(errs, fmt.Errorf("%s.name: %q must be 1-32 letters, digits or -_ (the RateLimit-Policy name)", p.path, p.Name))
		case seen[p.Name]:
			errs = append(errs, fmt.Errorf("%s.name: %q is taken by another row", p.path, p.Name))
		}
		seen[p.Name] = true
		if p.Scope != ScopeVendor && p.Scope != ScopeKey {
			errs = append(errs, fmt.Errorf("%s.scope: %q must be %s or %s", p.path, p.Scope, ScopeVendor, ScopeKey))
		}
		if p.Class == "" {
			errs = append(errs, fmt.Errorf("%s.class: name the routes it counts (%s, %s, or a class the routes declare)", p.path, ClassReads, ClassOrders))
		}
		if !p.Enabled() {
			errs = append(errs, fmt.Errorf("%s.rate must be positive", p.path))
		}
		for vendor, o := range p.Overrides {
			if err := o.validate(p.path + ".overrides." + vendor); err != nil {
				errs = append(errs, err)
			}
		}
		errs = append(errs, p.validateCost()...)
	}
	if !l.Vendor.Reads.Enabled() || !l.Vendor.Orders.Enabled() {
		errs = append(errs, fmt.Errorf("limits.vendor.reads and limits.vendor.orders must have a positive rate"))
	}
	return errs
}

// validateCost checks a row's cost against every limit it applies to: a
// request costing more than a whole bucket would be refused always.
func (p Policy) validateCost() []error {
	if p.Cost < 0 {
		return []error{fmt.Errorf("%s.cost must not be negative (0 or 1: a request is one token)", p.path)}
	}
	var errs []error
	check := func(where string, l Limit) {
		burst := l.Burst
		if burst == 0 {
			burst = l.Rate
		}
		if l.Enabled() && p.Cost > burst {
			errs = append(errs, fmt.Errorf("%s.cost (%d) is above the burst of %s (%d): every request would be refused", p.path, p.Cost, where, burst))
		}
	}
	check(p.path, p.Limit)
	if p.ShadowTwin != nil {
		check(p.path+".shadow_twin", *p.ShadowTwin)
	}
	for vendor, o := range p.Overrides {
		check(p.path+".overrides."+vendor, o)
		if o.ShadowTwin != nil {
			check(p.path+".overrides."+vendor+".shadow_twin", *o.ShadowTwin)
		}
	}
	return errs
}

func validName(s string) bool {
	if len(s) > 32 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// InFlight caps one vendor's requests in flight at each gateway, counted
// from admission until the answer is written (a streamed report until its
// last byte): past a cap the answer is 429 rate_limited with Retry-After.
// A rate limit bounds how often a vendor asks, not how long it holds what
// it got: without a cap, one vendor's slow report downloads held every
// backend connection of the gateway. The defaults are far above what an
// honest vendor holds at once. Reloaded on SIGHUP.
type InFlight struct {
	InFlightCaps `yaml:",inline"`
	// Overrides replace the caps for a vendor, by vendor id; a cap left at
	// 0 there is the default's.
	Overrides map[string]InFlightCaps `yaml:"overrides"`
}

// InFlightCaps are the caps of one vendor.
type InFlightCaps struct {
	// Requests is the most requests of one vendor in flight at once at
	// each gateway, report downloads among them. Default 64.
	Requests int `yaml:"requests" env:"GATEWAY_IN_FLIGHT_REQUESTS"`
	// Downloads is the most report downloads of one vendor in flight at
	// once at each gateway. Default 8.
	Downloads int `yaml:"downloads" env:"GATEWAY_IN_FLIGHT_DOWNLOADS"`
}

// defaultInFlight: 64 requests and 8 report downloads per vendor.
func defaultInFlight() InFlight {
	return InFlight{InFlightCaps: InFlightCaps{Requests: 64, Downloads: 8}}
}

// For returns vendor's caps: its override over the defaults.
func (f InFlight) For(vendor string) InFlightCaps {
	c := f.InFlightCaps
	if o, ok := f.Overrides[vendor]; ok {
		if o.Requests > 0 {
			c.Requests = o.Requests
		}
		if o.Downloads > 0 {
			c.Downloads = o.Downloads
		}
	}
	return c
}

func (f InFlight) validate() []error {
	var errs []error
	if f.Requests <= 0 || f.Downloads <= 0 {
		errs = append(errs, fmt.Errorf("in_flight.requests and in_flight.downloads must be positive (default 64 and 8 per vendor at each gateway)"))
	}
	for vendor, o := range f.Overrides {
		c := f.For(vendor)
		switch {
		case o.Requests < 0 || o.Downloads < 0:
			errs = append(errs, fmt.Errorf("in_flight.overrides.%s: caps must not be negative (0: the default)", vendor))
		case c.Downloads > c.Requests:
			errs = append(errs, fmt.Errorf("in_flight.overrides.%s: downloads (%d) must not exceed requests (%d): a download is a request too", vendor, c.Downloads, c.Requests))
		}
	}
	if f.Requests > 0 && f.Downloads > f.Requests {
		errs = append(errs, fmt.Errorf("in_flight.downloads (%d) must not exceed in_flight.requests (%d): a download is a request too", f.Downloads, f.Requests))
	}
	return errs
}
