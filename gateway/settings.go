package gateway

import (
	"crypto/tls"
	"fmt"
	"slices"
	"strings"
	"time"

	"vendorgate/config"
	"vendorgate/gateway/admin"
	"vendorgate/gateway/clientip"
	"vendorgate/gateway/edge"
	"vendorgate/gateway/inflight"
	"vendorgate/gateway/policy"
	"vendorgate/gateway/policyconf"
	"vendorgate/gateway/stores"
	"vendorgate/gateway/throttle"
	"vendorgate/gateway/usage"
	"vendorgate/shared/apikey"
	"vendorgate/shared/hoptls"
)

// snapshot is the reloadable part of the configuration compiled for the
// hot path; swapped atomically by Reload.
type snapshot struct {
	// cfg is the configuration compiled (a copy), for the changes a
	// reload logs.
	cfg        *config.Gateway
	failedKeys throttle.Thresholds
	version    string
	// clientIP finds a request's client; proxies knows the trusted
	// proxies, whose connections are exempt from the per-peer bounds (or,
	// with proxy_protocol, read for a header). With proxy_protocol
	// clientIP trusts no one: the client's address is the connection's,
	// from the PROXY header, and an X-Forwarded-For inside the stream is
	// the client's own claim.
	clientIP *clientip.Resolver
	proxies  *clientip.Resolver
	// The limit policy table: its rows as configured (the docs page), its
	// bucket layout, and the table compiled for the default limits and for
	// each vendor with an override.
	policies  []config.Policy
	names     []string // the rows' names by index (usage stores counts by name)
	layout    *policy.Layout
	def       *policy.Table
	overrides map[string]*policy.Table
	// The caps of a vendor's requests in flight: the defaults, and the
	// vendors with caps of their own.
	inFlight          inflight.Caps
	inFlightOverrides map[string]inflight.Caps
	// decisions are the decision counters of each row (a check's Policy
	// index; a row's name is the same in every table), set by
	// countDecisions before the snapshot serves.
	decisions []*admin.Decisions
}

// Check runs every check the gateway makes of c before it starts, without
// starting anything: the settings' own (config.Validate), the policy table
// compiled for every route and every override, the key-signing secrets and
// the Redis URLs. `gateway -check` and a start refuse the same files with
// the same message; a reload refuses them too.
func Check(c *config.Gateway) error {
	if _, err := compileValid(c, nil); err != nil {
		return err
	}
	_, err := backendTLS(c.BackendTLS)
	return err
}

// CheckCertificates reads the public listener's certificate files as a
// start does, for `gateway -check` (edge.CheckCertificates): an error for
// files a start would refuse or a set that does not cover public_base_url's
// host, a warning for each certificate expired at now.
func CheckCertificates(c *config.Gateway, now time.Time) (warnings []string, err error) {
	return edge.CheckCertificates(c.TLS, c.PublicBaseURL, now)
}

// backendTLS reads the files of the calls to the backend: nil, the
// system's roots and no client certificate, when none is named.
func backendTLS(b config.BackendTLS) (*tls.Config, error) {
	tc, err := hoptls.ClientConfig(hoptls.ClientFiles{CAFile: b.CAFile, CertFile: b.CertFile, KeyFile: b.KeyFile})
	if err != nil {
		return nil, fmt.Errorf("backend_tls: %w", err)
	}
	return tc, nil
}

// compileValid checks c, a complete configuration, as Check says, and
// compiles its reloadable part; prev is the snapshot in force (nil at
// start).
func compileValid(c *config.Gateway, prev *snapshot) (*snapshot, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if _, err := apikey.NewSigner(c.KeySigningSecrets); err != nil {
		return nil, fmt.Errorf("key_signing_secrets: %w", err)
	}
	if len(c.Redis.URL) > 0 {
		if err := stores.Check(c.Redis); err != nil {
			return nil, err
		}
	}
	return compile(c, prev)
}

// compile compiles the reloadable part of c, already validated. The bucket
// layout of prev is kept when the rows are the same, so that the bucket
// names each cached key holds stay valid.
func compile(c *config.Gateway, prev *snapshot) (*snapshot, error) {
	trusted, err := config.ParseCIDRs(c.TrustedProxies)
	if err != nil {
		return nil, fmt.Errorf("trusted_proxies: %w", err)
	}
	rows := c.Limits.Rows()
	cp := *c
	names := make([]string, len(rows))
	for i, r := range rows {
		names[i] = r.Name
	}
	proxies := clientip.New(trusted)
	clientIP := proxies
	if c.ProxyProtocol {
		clientIP = clientip.New(nil)
	}
	sn := &snapshot{cfg: &cp, policies: rows, names: names, version: c.Version, clientIP: clientIP, proxies: proxies,
		failedKeys: throttle.Thresholds{PerAddress: c.FailedKeys.PerAddress, PerKey: c.FailedKeys.PerKey, Window: c.FailedKeys.Window}}
	sn.inFlight = capsOf(c.InFlight.InFlightCaps)
	for v := range c.InFlight.Overrides {
		if sn.inFlightOverrides == nil {
			sn.inFlightOverrides = make(map[string]inflight.Caps)
		}
		sn.inFlightOverrides[v] = capsOf(c.InFlight.For(v))
	}
	if sn.def, err = policyconf.Table(rows, "", routeClasses()); err != nil {
		return nil, err
	}
	tables := []*policy.Table{sn.def}
	for _, v := range policyconf.OverriddenVendors(rows) {
		if sn.overrides == nil {
			sn.overrides = make(map[string]*policy.Table)
		}
		if sn.overrides[v], err = policyconf.Table(rows, v, routeClasses()); err != nil {
			return nil, err
		}
		tables = append(tables, sn.overrides[v])
	}
	var prevLayout *policy.Layout
	if prev != nil {
		prevLayout = prev.layout
	}
	// Keys hold bucket names only for the rows some table checks.
	sn.layout = policy.LayoutOf(tables, prevLayout)
	return sn, nil
}

// reloadable are the settings a reload applies (Reload), by name or by the
// name of the section they are in; any other takes effect on a restart.
var reloadable = []string{"limits", "failed_keys.per_address", "failed_keys.per_key", "failed_keys.window",
	"trusted_proxies", "redis.lease_max", "redis.lease_ttl"}

// reloads says whether a reload applies the setting named (as config.Diff
// names it).
func reloads(setting string) bool {
	for _, r := range reloadable {
		if setting == r || strings.HasPrefix(setting, r+".") || strings.HasPrefix(setting, r+"[") {
			return true
		}
	}
	return false
}

// changes are the settings that differ from old to new, as log values:
// those a reload applied, and those that wait for a restart. Secrets are
// named, never shown.
func changes(old, new *config.Gateway) (applied, restart []string, err error) {
	cs, err := config.Diff(old, new)
	applied, restart = []string{}, []string{}
	for _, c := range cs {
		if reloads(c.Setting) {
			applied = append(applied, c.String())
		} else {
			restart = append(restart, c.String())
		}
	}
	return applied, restart, err
}

// countDecisions resolves the decision counters of sn's rows once, so that
// a request counts its decisions by row index.
func (sn *snapshot) countDecisions(m *admin.Metrics) {
	sn.decisions = make([]*admin.Decisions, len(sn.policies))
	for i, r := range sn.policies {
		sn.decisions[i] = m.Decisions(r.Name)
	}
}

func capsOf(c config.InFlightCaps) inflight.Caps {
	return inflight.Caps{Requests: int32(c.Requests), Downloads: int32(c.Downloads)}
}

// inFlightCaps are vendor's caps of requests in flight: its override, or
// the defaults.
func (sn *snapshot) inFlightCaps(vendor string) inflight.Caps {
	if len(sn.inFlightOverrides) > 0 {
		if c, ok := sn.inFlightOverrides[vendor]; ok {
			return c
		}
	}
	return sn.inFlight
}

// table is the policy table of vendor: its override, or the defaults.
func (sn *snapshot) table(vendor string) *policy.Table {
	if len(sn.overrides) > 0 {
		if t, ok := sn.overrides[vendor]; ok {
			return t
		}
	}
	return sn.def
}

// usageLimits is the policy table's rows for vendor as configured now
// (overrides applied), for the usage view: a concurrency row's quota is
// its cap, with no period.
func (g *Gateway) usageLimits(vendor string) []usage.Limit {
	t := g.snap.Load().table(vendor)
	ls := make([]usage.Limit, len(t.Policies))
	for i, p := range t.Policies {
		ls[i] = usage.Limit{Name: p.Name, On: p.On()}
		if ls[i].On {
			ls[i].Quota, ls[i].Period = p.Quota(), p.Period
		}
	}
	return ls
}

// usageQuotas reads quota policy name's counter of vendor for the usage
// view: per-vendor quotas only (a per-key quota's counters are the keys').
func (g *Gateway) usageQuotas(vendor, name string) (usage.QuotaUsed, bool, error) {
	sn := g.snap.Load()
	t := sn.table(vendor)
	p := slices.IndexFunc(t.Policies, func(row policy.Policy) bool { return row.Name == name })
	if p < 0 {
		return usage.QuotaUsed{}, false, nil
	}
	row := t.Policies[p]
	if row.Kind != policy.Quota || !row.Valid() || row.Scope != policy.PerVendor {
		return usage.QuotaUsed{}, false, nil
	}
	key := sn.layout.Buckets(vendor, "").Name(p).Key
	used, start, end, err := g.stores.Windows.Used(key, row.Rate)
	if err != nil {
		return usage.QuotaUsed{}, false, fmt.Errorf("quota %s: %w", row.Name, err)
	}
	return usage.QuotaUsed{Used: used, Quota: row.Limit, WindowStart: start, WindowEnd: end}, true, nil
}

// usageNames is the policy table's names by index now: the usage counts
// of index i are stored under names[i].
func (g *Gateway) usageNames() []string { return g.snap.Load().names }
