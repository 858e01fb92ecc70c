package gateway

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"vendorgate/gateway/auth"
	"vendorgate/gateway/clientip"
	"vendorgate/gateway/limit"
	"vendorgate/gateway/throttle"
	"vendorgate/gateway/usage"
)

// Limit is one rate limit: Rate requests per Period, bursts up to Burst
// (Rate when zero). Rate 0 means not set. Shadow counts and logs denials
// but never refuses.
type Limit struct {
	Rate   int
	Period time.Duration
	Burst  int
	Shadow bool
	// Twin is a shadow limit evaluated beside this one; nil when none.
	Twin *Limit
}

// LimitPair is the reads and orders limits of one scope.
type LimitPair struct {
	Reads, Orders Limit
}

// Settings is what a reload may change without a restart.
type Settings struct {
	// Vendor limits are shared by all of a vendor's keys and all replicas.
	Vendor LimitPair
	// PerKey limits apply in addition when set.
	PerKey LimitPair
	// Overrides replace a vendor's limits by vendor id (a limit not set in
	// the override keeps the default).
	Overrides map[string]LimitPair
	// FailedKeys are the failed-key throttle's thresholds.
	FailedKeys throttle.Thresholds
	// TrustedProxies are the only peers whose X-Forwarded-For is believed.
	TrustedProxies []netip.Prefix
	// Version names this configuration in vendorgate_gateway_config_info.
	Version string
}

// validate refuses settings that would make the gateway refuse everyone or
// nobody.
func (s Settings) validate() error {
	var errs []error
	check := func(name string, l Limit, required bool) {
		if l.Rate == 0 && !required {
			return
		}
		if l.Rate <= 0 || l.Period <= 0 || l.Burst < 0 {
			errs = append(errs, fmt.Errorf("%s: rate and period must be positive", name))
		}
		if t := l.Twin; t != nil && (t.Rate <= 0 || t.Period <= 0 || t.Burst < 0) {
			errs = append(errs, fmt.Errorf("%s.shadow_twin: rate and period must be positive", name))
		}
	}
	check("vendor.reads", s.Vendor.Reads, true)
	check("vendor.orders", s.Vendor.Orders, true)
	check("per_key.reads", s.PerKey.Reads, false)
	check("per_key.orders", s.PerKey.Orders, false)
	for v, o := range s.Overrides {
		check("overrides."+v+".reads", o.Reads, false)
		check("overrides."+v+".orders", o.Orders, false)
	}
	if s.FailedKeys.PerAddress <= 0 || s.FailedKeys.PerKey <= 0 || s.FailedKeys.Window <= 0 {
		errs = append(errs, errors.New("failed_keys: per_address, per_key and window must be positive"))
	}
	return errors.Join(errs...)
}

// snapshot is Settings compiled for the hot path; swapped atomically.
type snapshot struct {
	settings  Settings
	clientIP  *clientip.Resolver
	def       *limitSet
	overrides map[string]*limitSet
}

// limitSet is the limits of one vendor (the defaults or an override), with
// the RateLimit-Policy header values built once.
type limitSet struct {
	class [2]classLimits // by limitClass
}

type classLimits struct {
	vendor, key         limit.Rate
	vendorTwin, keyTwin limit.Rate // shadow twins; zero when none
	policy              []byte     // RateLimit-Policy value; nil when no enforced limit
}

func compile(s Settings) (*snapshot, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	sn := &snapshot{settings: s, clientIP: clientip.New(s.TrustedProxies), overrides: make(map[string]*limitSet, len(s.Overrides))}
	sn.def = newLimitSet(s.Vendor, s.PerKey)
	for v, o := range s.Overrides {
		pair := s.Vendor
		if o.Reads.Rate > 0 {
			pair.Reads = o.Reads
		}
		if o.Orders.Rate > 0 {
			pair.Orders = o.Orders
		}
		sn.overrides[v] = newLimitSet(pair, s.PerKey)
	}
	return sn, nil
}

func newLimitSet(vendor, perKey LimitPair) *limitSet {
	ls := &limitSet{}
	ls.class[classReads] = newClassLimits(rateOf("reads", vendor.Reads), rateOf("key-reads", perKey.Reads))
	ls.class[classOrders] = newClassLimits(rateOf("orders", vendor.Orders), rateOf("key-orders", perKey.Orders))
	ls.class[classReads].vendorTwin, ls.class[classReads].keyTwin = twinOf("reads", vendor.Reads), twinOf("key-reads", perKey.Reads)
	ls.class[classOrders].vendorTwin, ls.class[classOrders].keyTwin = twinOf("orders", vendor.Orders), twinOf("key-orders", perKey.Orders)
	return ls
}

func rateOf(name string, l Limit) limit.Rate {
	return limit.Rate{Name: name, Limit: l.Rate, Burst: l.Burst, Period: l.Period, Shadow: l.Shadow}
}

// twinOf is l's shadow twin as a shadow rate of the same policy name; zero
// (never checked) when l has none or is not set itself.
func twinOf(name string, l Limit) limit.Rate {
	if l.Twin == nil || l.Rate <= 0 {
		return limit.Rate{}
	}
	t := rateOf(name, *l.Twin)
	t.Shadow = true
	return t
}

func newClassLimits(vendor, key limit.Rate) classLimits {
	c := classLimits{vendor: vendor, key: key}
	for _, r := range []limit.Rate{vendor, key} {
		if r.Limit <= 0 || r.Shadow {
			continue // shadow limits never refuse, so clients are not told of them
		}
		if len(c.policy) > 0 {
			c.policy = append(c.policy, ", "...)
		}
		c.policy = append(c.policy, '"')
		c.policy = append(c.policy, r.Name...)
		c.policy = append(c.policy, `";q=`...)
		c.policy = strconv.AppendInt(c.policy, int64(r.Quota()), 10)
		c.policy = append(c.policy, ";w="...)
		c.policy = strconv.AppendInt(c.policy, int64((r.Period+time.Second-1)/time.Second), 10)
	}
	return c
}

// limits returns the checks of a request of class cl by identity id.
func (sn *snapshot) limits(id *auth.Identity, cl limitClass) (limit.Checks, *classLimits) {
	ls := sn.def
	if len(sn.overrides) > 0 {
		if o, ok := sn.overrides[id.VendorID]; ok {
			ls = o
		}
	}
	c := &ls.class[cl]
	var cs limit.Checks
	if cl == classOrders {
		cs.Add(limit.Check{Key: id.VendorOrders, Rate: c.vendor})
		cs.Add(limit.Check{Key: id.KeyOrders, Rate: c.key})
		cs.Add(limit.Check{Key: id.VendorOrdersTwin, Rate: c.vendorTwin})
		cs.Add(limit.Check{Key: id.KeyOrdersTwin, Rate: c.keyTwin})
	} else {
		cs.Add(limit.Check{Key: id.VendorReads, Rate: c.vendor})
		cs.Add(limit.Check{Key: id.KeyReads, Rate: c.key})
		cs.Add(limit.Check{Key: id.VendorReadsTwin, Rate: c.vendorTwin})
		cs.Add(limit.Check{Key: id.KeyReadsTwin, Rate: c.keyTwin})
	}
	return cs, c
}

// usageLimits is a policy's quota and period for vendor as configured now
// (overrides applied), for the usage view.
func (g *Gateway) usageLimits(vendor string, p usage.Policy) (int, time.Duration, bool) {
	sn := g.snap.Load()
	ls := sn.def
	if o, ok := sn.overrides[vendor]; ok {
		ls = o
	}
	var r limit.Rate
	switch p {
	case usage.Reads:
		r = ls.class[classReads].vendor
	case usage.Orders:
		r = ls.class[classOrders].vendor
	case usage.KeyReads:
		r = ls.class[classReads].key
	case usage.KeyOrders:
		r = ls.class[classOrders].key
	}
	if r.Limit <= 0 {
		return 0, 0, false
	}
	return r.Quota(), r.Period, true
}
