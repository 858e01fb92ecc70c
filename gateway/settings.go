package gateway

import (
	"fmt"
	"strconv"
	"time"

	"vendorgate/config"
	"vendorgate/gateway/auth"
	"vendorgate/gateway/clientip"
	"vendorgate/gateway/limit"
	"vendorgate/gateway/throttle"
	"vendorgate/gateway/usage"
)

// snapshot is the reloadable part of the configuration compiled for the
// hot path; swapped atomically by Reload.
type snapshot struct {
	configured config.Limits // as written; def and overrides are compiled from it
	failedKeys throttle.Thresholds
	version    string
	clientIP   *clientip.Resolver
	def        *limitSet
	overrides  map[string]*limitSet
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

// compileValid validates c, a complete configuration, and compiles its
// reloadable part.
func compileValid(c *config.Gateway) (*snapshot, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return compile(c)
}

// compile compiles the reloadable part of c, already validated.
func compile(c *config.Gateway) (*snapshot, error) {
	trusted, err := config.ParseCIDRs(c.TrustedProxies)
	if err != nil {
		return nil, fmt.Errorf("trusted_proxies: %w", err)
	}
	l := c.Limits
	sn := &snapshot{configured: l, version: c.Version, clientIP: clientip.New(trusted),
		failedKeys: throttle.Thresholds{PerAddress: c.FailedKeys.PerAddress, PerKey: c.FailedKeys.PerKey, Window: c.FailedKeys.Window},
		overrides:  make(map[string]*limitSet, len(l.Overrides))}
	sn.def = newLimitSet(l.Vendor, l.PerKey)
	for v, o := range l.Overrides {
		pair := l.Vendor
		if o.Reads.Enabled() {
			pair.Reads = o.Reads
		}
		if o.Orders.Enabled() {
			pair.Orders = o.Orders
		}
		sn.overrides[v] = newLimitSet(pair, l.PerKey)
	}
	return sn, nil
}

func newLimitSet(vendor, perKey config.LimitPair) *limitSet {
	ls := &limitSet{}
	ls.class[classReads] = newClassLimits(rateOf("reads", vendor.Reads), rateOf("key-reads", perKey.Reads))
	ls.class[classOrders] = newClassLimits(rateOf("orders", vendor.Orders), rateOf("key-orders", perKey.Orders))
	ls.class[classReads].vendorTwin, ls.class[classReads].keyTwin = twinOf("reads", vendor.Reads), twinOf("key-reads", perKey.Reads)
	ls.class[classOrders].vendorTwin, ls.class[classOrders].keyTwin = twinOf("orders", vendor.Orders), twinOf("key-orders", perKey.Orders)
	return ls
}

func rateOf(name string, l config.Limit) limit.Rate {
	return limit.Rate{Name: name, Limit: l.Rate, Burst: l.Burst, Period: l.Period, Shadow: l.Shadow}
}

// twinOf is l's shadow twin as a shadow rate of the same policy name; zero
// (never checked) when l has none or is not set itself.
func twinOf(name string, l config.Limit) limit.Rate {
	if l.ShadowTwin == nil || !l.Enabled() {
		return limit.Rate{}
	}
	t := rateOf(name, *l.ShadowTwin)
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
