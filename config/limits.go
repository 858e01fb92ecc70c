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
//
// Kind is how the limit decides: KindGCRA (the default, a token bucket),
// KindQuota (Rate in each calendar Window, "day" or "month" in UTC, or in
// each span of Days days; Period is not set) or KindWindow (a sliding
// window: at most Rate in any Period), or, on a row of limits.policies,
// KindConcurrency (at most Rate requests in flight at once). A quota or a
// window has no burst and no shadow twin. Lease (a quota only): the
// gateways lease the quota's counter in slices (see redis.lease_max and
// redis.lease_ttl) rather than asking Redis for each request; never over
// the quota, it may refuse while another gateway holds unused slices.
type Limit struct {
	Rate       int           `yaml:"rate"`
	Period     time.Duration `yaml:"period"`
	Burst      int           `yaml:"burst"`
	Shadow     bool          `yaml:"shadow"`
	ShadowTwin *Limit        `yaml:"shadow_twin"`
	Kind       string        `yaml:"kind"`
	Window     string        `yaml:"window"`
	Days       int           `yaml:"days"`
	Lease      bool          `yaml:"lease"`
}

// The kinds of limit.
const (
	KindGCRA   = "gcra"
	KindQuota  = "quota"
	KindWindow = "window"
	// KindConcurrency: at most rate requests in flight at once, over every
	// gateway; a slot is freed when the answer is done, or redis.slot_ttl
	// after its gateway died. No period, burst, shadow or twin.
	KindConcurrency = "concurrency"
)

// The calendar windows of a quota (Limit.Window).
const (
	WindowDay   = "day"
	WindowMonth = "month"
)

// MaxWindowRate is the most requests a sliding window may admit: its
// bucket in Redis holds one entry per request in the window.
const MaxWindowRate = 100000

// MaxQuotaDays is the longest quota window in days.
const MaxQuotaDays = 366

// Enabled reports whether l is set.
func (l Limit) Enabled() bool { return l.Rate > 0 }

// KindOf is l's kind: KindGCRA when not set.
func (l Limit) KindOf() string {
	if l.Kind == "" {
		return KindGCRA
	}
	return l.Kind
}

// validateKind checks what l's kind asks of it.
func (l Limit) validateKind(name string) error {
	if l.Lease && l.KindOf() != KindQuota {
		return fmt.Errorf("%s.lease: only a quota is leased this way (a %s row is leased by redis.lease_max, or never)", name, l.KindOf())
	}
	switch l.KindOf() {
	case KindGCRA:
		if l.Window != "" || l.Days != 0 {
			return fmt.Errorf("%s: window and days are for kind quota (kind is %s)", name, KindGCRA)
		}
		return nil
	case KindQuota:
		switch {
		case l.Period != 0:
			return fmt.Errorf("%s.period: a quota counts per calendar window: set window (day or month) or days, not period", name)
		case l.Window != "" && l.Days != 0:
			return fmt.Errorf("%s: set window or days, not both", name)
		case l.Window == "" && l.Days == 0:
			return fmt.Errorf("%s: a quota needs window (day or month, in UTC) or days (1-%d)", name, MaxQuotaDays)
		case l.Window != "" && l.Window != WindowDay && l.Window != WindowMonth:
			return fmt.Errorf("%s.window: %q must be %s or %s (UTC), or use days", name, l.Window, WindowDay, WindowMonth)
		case l.Window == "" && (l.Days < 1 || l.Days > MaxQuotaDays):
			return fmt.Errorf("%s.days: %d must be 1-%d", name, l.Days, MaxQuotaDays)
		}
	case KindWindow:
		switch {
		case l.Window != "" || l.Days != 0:
			return fmt.Errorf("%s: a sliding window counts over period; window and days are for kind quota", name)
		case l.Period < time.Second || l.Period%time.Millisecond != 0:
			return fmt.Errorf("%s.period must be at least 1s, in whole milliseconds (for example 1m)", name)
		case l.Rate > MaxWindowRate:
			return fmt.Errorf("%s.rate: a sliding window admits at most %d (Redis keeps one entry per request in the window)", name, MaxWindowRate)
		}
	default:
		return fmt.Errorf("%s.kind: %q must be %s, %s, %s or %s", name, l.Kind, KindGCRA, KindQuota, KindWindow, KindConcurrency)
	}
	switch {
	case l.Burst != 0:
		return fmt.Errorf("%s.burst: a %s has no burst (remove it)", name, l.Kind)
	case l.ShadowTwin != nil:
		return fmt.Errorf("%s.shadow_twin: a %s has no shadow twin (add a shadow row instead)", name, l.Kind)
	}
	return nil
}

func (l Limit) validate(name string) error {
	if !l.Enabled() {
		return nil
	}
	if err := l.validateKind(name); err != nil {
		return err
	}
	if l.KindOf() == KindQuota {
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
// An override keeps the row's kind and calendar window.
func (p Policy) For(vendor string) Limit {
	if o, ok := p.Overrides[vendor]; ok {
		o.Kind, o.Window, o.Days, o.Lease = p.Kind, p.Window, p.Days, p.Lease
		return o
	}
	return p.Limit
}

// validateOverride checks row p's override for vendor: it keeps the row's
// kind and window (it sets only rate, period, burst and shadow).
func (p Policy) validateOverride(vendor string) error {
	o := p.Overrides[vendor]
	name := p.path + ".overrides." + vendor
	if l := p.Path(); l == "limits.vendor.reads" || l == "limits.vendor.orders" {
		name = "limits.overrides." + vendor + "." + p.Name
	}
	if o.Kind != "" || o.Window != "" || o.Days != 0 {
		return fmt.Errorf("%s: an override keeps the row's kind and window: set only rate, period, burst and shadow", name)
	}
	if o.Lease {
		return fmt.Errorf("%s.lease: an override keeps the row's lease: set lease on the row", name)
	}
	return p.For(vendor).validate(name)
}

// validate checks every row: the one place a policy's settings are
// checked.
func (l Limits) validate() []error {
	var errs []error
	rows := l.Rows()
	seen := make(map[string]bool, len(rows))
	for i, p := range rows {
		if p.Kind == KindConcurrency {
			if i >= 4 { // a built-in row of this kind is refused below
				errs = append(errs, p.validateConcurrency()...)
			}
		} else if err := p.Limit.validate(p.path); err != nil {
			errs = append(errs, err)
		}
		if i < 4 {
			// The built-in rows: their name, scope and class are fixed;
			// they count requests a minute (or so), so they may be a
			// sliding window but not a calendar quota.
			seen[p.Name] = true
			if p.KindOf() == KindQuota || p.KindOf() == KindConcurrency {
				errs = append(errs, fmt.Errorf("%s.kind: the built-in rows are %s or %s; add a quota or a concurrency cap as a row of limits.policies", p.path, KindGCRA, KindWindow))
			}
			for vendor := range p.Overrides {
				if err := p.validateOverride(vendor); err != nil {
					errs = append(errs, err)
				}
			}
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
		for vendor := range p.Overrides {
			if p.Kind == KindConcurrency {
				continue // validateConcurrency checked them
			}
			if err := p.validateOverride(vendor); err != nil {
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

// validateConcurrency checks a row of kind concurrency and its overrides:
// a cap (rate) and nothing of a rate over time.
func (p Policy) validateConcurrency() []error {
	var errs []error
	check := func(path string, l Limit) {
		switch {
		case l.Rate < 0:
			errs = append(errs, fmt.Errorf("%s.rate must be positive: the most requests in flight at once", path))
		case l.Period != 0:
			errs = append(errs, fmt.Errorf("%s.period: a policy of kind concurrency has no period (its rate is the most requests in flight at once)", path))
		case l.Burst != 0:
			errs = append(errs, fmt.Errorf("%s.burst: a policy of kind concurrency has no burst", path))
		case l.Shadow || l.ShadowTwin != nil:
			errs = append(errs, fmt.Errorf("%s: a policy of kind concurrency has no shadow flag or shadow twin", path))
		case l.Lease:
			errs = append(errs, fmt.Errorf("%s.lease: only a quota is leased this way (a policy of kind concurrency never is)", path))
		case l.Window != "" || l.Days != 0 || l.Kind != "" && path != p.path:
			errs = append(errs, fmt.Errorf("%s: a policy of kind concurrency has no calendar window, and an override keeps its kind", path))
		}
	}
	check(p.path, p.Limit)
	for vendor, o := range p.Overrides {
		if !o.Enabled() {
			errs = append(errs, fmt.Errorf("%s.overrides.%s.rate must be positive: the most requests in flight at once", p.path, vendor))
			continue
		}
		check(p.path+".overrides."+vendor, o)
	}
	return errs
}

// validateCost checks a row's cost against every limit it applies to: a
// request costing more than a whole bucket would be refused always.
func (p Policy) validateCost() []error {
	if p.Cost < 0 {
		return []error{fmt.Errorf("%s.cost must not be negative (0 or 1: a request is one token)", p.path)}
	}
	if k := p.KindOf(); k != KindGCRA && (p.Cost > 1 || p.RefundFailures) {
		return []error{fmt.Errorf("%s: cost and refund_failures are for kind %s (a %s counts requests)", p.path, KindGCRA, k)}
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
