package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// The Redis-limited gateway with other lease settings, measured beside
// row 4 (the defaults: redis.lease_max 16, redis.lease_ttl 2s) so the table
// shows what leases buy.
const (
	rowRedisNoLease = "gateway-redis-lease1" // redis.lease_max: 1, every request asks Redis
	rowRedisTTL1    = "gateway-redis-ttl1"   // redis.lease_ttl: 1s, a tighter bound
)

// Row 4 with one more policy on the reads the load sends (a quota or cap
// that never refuses): what each kind adds to a request. Measured only
// when asked for (-rows).
const (
	rowRedisQuota      = "gateway-redis-quota"       // an exact daily quota
	rowRedisQuotaLease = "gateway-redis-quota-lease" // the same quota, lease: true
	rowRedisSlot       = "gateway-redis-slot"        // a concurrency cap
)

// policyRows are the rows of one more policy, in table order.
func policyRows() []string { return []string{rowRedisQuota, rowRedisQuotaLease, rowRedisSlot} }

// rowPolicies is the limits.policies section of row id's configuration
// ("" for a row without one).
func rowPolicies(id string) string {
	switch id {
	case rowRedisQuota:
		return "  policies:\n    - {name: reads-day, scope: vendor, class: reads, kind: quota, rate: 1000000000, window: day}\n"
	case rowRedisQuotaLease:
		return "  policies:\n    - {name: reads-day, scope: vendor, class: reads, kind: quota, rate: 1000000000, window: day, lease: true}\n"
	case rowRedisSlot:
		return "  policies:\n    - {name: reads-at-once, scope: vendor, class: reads, kind: concurrency, rate: 100000}\n"
	}
	return ""
}

// leaseRowLabel is the table name of a lease row; ok is false for others.
func leaseRowLabel(id string) (string, bool) {
	switch id {
	case rowRedisNoLease:
		return "4a vendorgate, Redis limiter, lease_max 1", true
	case rowRedisTTL1:
		return "4c vendorgate, Redis limiter, lease_ttl 1s", true
	case rowRedisQuota:
		return "4d vendorgate, Redis limiter + a daily quota", true
	case rowRedisQuotaLease:
		return "4e vendorgate, Redis limiter + a leased daily quota", true
	case rowRedisSlot:
		return "4f vendorgate, Redis limiter + a concurrency cap", true
	}
	return "", false
}

// leaseRows are the Redis rows whose lease settings differ, in table order
// (after row 4).
func leaseRows() []string { return []string{rowRedisNoLease, rowRedisTTL1} }

// redisRows are the Redis-limited rows of this checkout's gateway: row 4
// and its lease variants.
func redisRows() []string { return append([]string{rowGatewayRedis}, leaseRows()...) }

// leaseSettings is the gateway configuration's redis section of row id
// ("" for the defaults).
func leaseSettings(id string) string {
	switch id {
	case rowRedisNoLease:
		return "redis:\n  lease_max: 1\n"
	case rowRedisTTL1:
		return "redis:\n  lease_ttl: 1s\n"
	}
	return ""
}

// leaseTTL is row id's redis.lease_ttl.
func leaseTTL(id string) time.Duration {
	if id == rowRedisTTL1 {
		return time.Second
	}
	return 2 * time.Second
}

// Gateway metrics of the leased limiter.
const (
	chargedMetric         = "vendorgate_gateway_limiter_buckets_charged_total"
	leaseAdmissionsMetric = "vendorgate_gateway_limiter_lease_admissions_total"
	leaseTokensMetric     = "vendorgate_gateway_limiter_lease_tokens_total"
)

// leaseCounts are a Redis-limited gateway's lease counters; ok says they
// were read (a gateway without them, an older release, leaves it false).
type leaseCounts struct {
	ok bool
	// charged is the buckets the Redis script charged, admissions the
	// requests admitted from a lease without asking Redis; granted,
	// refunded and dropped the leased tokens by event.
	charged, admissions, granted, refunded, dropped float64
}

// readLeaseCounts reads r's lease counters from its /metrics; zero for a
// row without Redis or admin listener.
func readLeaseCounts(r *row) leaseCounts {
	if r.admin == "" || r.redis == nil {
		return leaseCounts{}
	}
	var c leaseCounts
	var err error
	if c.charged, err = metricValue(r.admin, chargedMetric); err != nil {
		return leaseCounts{}
	}
	if c.admissions, err = metricValue(r.admin, leaseAdmissionsMetric); err != nil {
		return leaseCounts{}
	}
	// The tokens counter has no sample before the first lease.
	if ev, err := metricByLabel(r.admin, leaseTokensMetric, "event"); err == nil {
		c.granted, c.refunded, c.dropped = ev["granted"], ev["refunded"], ev["dropped"]
	}
	c.ok = true
	return c
}

// minus is c - before, over one run; not ok unless both were read.
func (c leaseCounts) minus(before leaseCounts) leaseCounts {
	return leaseCounts{ok: c.ok && before.ok, charged: c.charged - before.charged, admissions: c.admissions - before.admissions,
		granted: c.granted - before.granted, refunded: c.refunded - before.refunded, dropped: c.dropped - before.dropped}
}

// sumLeases adds the runs' counts; not ok unless every run's were read.
func sumLeases(ms []measurement) leaseCounts {
	if len(ms) == 0 {
		return leaseCounts{}
	}
	s := leaseCounts{ok: true}
	for _, m := range ms {
		c := m.Leases
		s.ok = s.ok && c.ok
		s.charged += c.charged
		s.admissions += c.admissions
		s.granted += c.granted
		s.refunded += c.refunded
		s.dropped += c.dropped
	}
	return s
}

// leaseReport is the "Leases" section: the in-process row and the Redis
// rows side by side on the many-vendor load, what each lease setting costs
// per request, the targets, and the real-limits load.
func (res *results) leaseReport() string {
	var rows []*row
	for _, r := range res.rows {
		switch r.id {
		case rowGateway, rowGatewayRedis, rowRedisNoLease, rowRedisTTL1, rowGatewayRedisBase, rowRedisQuota, rowRedisQuotaLease, rowRedisSlot:
			rows = append(rows, r)
		}
	}
	var sb strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&sb, format, a...) }
	var lines, targets []string
	for _, c := range res.opts.cells() {
		for _, r := range rows {
			s := res.cells[r.id][c]
			m, ok := s.median()
			if !ok {
				continue
			}
			gwCPU, redisCPU, scripts, charged, fromLeases := "–", "–", "–", "–", "–"
			if m.CPUOK && m.OK > 0 {
				gwCPU = perRequest(m.ProxyCPU, m.OK)
				if r.redis != nil {
					redisCPU = perRequest(m.RedisCPU, m.OK)
					scripts = fmt.Sprintf("%.3f", float64(m.Scripts)/float64(m.OK))
				}
			}
			if m.Leases.ok && m.OK > 0 {
				charged = fmt.Sprintf("%.3f", m.Leases.charged/float64(m.OK))
				fromLeases = fmt.Sprintf("%.0f%%", 100*m.Leases.admissions/float64(m.OK))
			}
			lines = append(lines, fmt.Sprintf("| %s | %s | %d | %.0f | %s | %s | %s | %s | %s | %s | %s |", r.label(), c.load, c.conns, m.RPS,
				ratioCell(s, res.cells[rowBare][c]), ratioCell(s, res.cells[rowGateway][c]), gwCPU, redisCPU, scripts, charged, fromLeases))
			if c.load == loadMany && (r.id == rowGatewayRedis || r.id == rowRedisTTL1) {
				targets = append(targets, res.leaseTargets(r, c, m)...)
			}
		}
	}
	if len(lines) == 0 && len(res.real) == 0 {
		return ""
	}
	w("\n### Leases\n\n")
	if len(lines) > 0 {
		w("The Redis limiter with its default leases (row 4: redis.lease_max 16, redis.lease_ttl 2s) beside the same gateway " +
			"with lease_max 1 (no leases: every request asks Redis) and the in-process limiter, from the runs of the table above " +
			"(medians of req/s; CPU, script calls and buckets per request summed over the repetitions and divided by the 2xx answers). " +
			"Buckets charged are the gateway's " + chargedMetric + " (buckets the Redis script charged, a lease's with its request's own); " +
			"admitted from leases its " + leaseAdmissionsMetric + ".\n\n")
		w("| row | load | conns | req/s | × bare proxy | × in-process | CPU per request: gateway | Redis | script calls per request | buckets charged per request | admitted from leases |\n")
		w("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		w("%s\n", strings.Join(lines, "\n"))
	}
	w("%s", res.realReport())
	targets = append(targets, res.realTargets()...)
	if len(targets) > 0 {
		w("\n**Lease targets** (issue 21, default lease settings unless the row says otherwise):\n\n%s\n", strings.Join(targets, "\n"))
	}
	return sb.String()
}

// leaseTargets are issue 21's targets on the many-vendor load for row r.
func (res *results) leaseTargets(r *row, c cell, m measurement) []string {
	var out []string
	name := fmt.Sprintf("- %s, %s, %d conns", r.label(), c.load, c.conns)
	if v, ok := res.cells[r.id][c].ratio(res.cells[rowGateway][c]); ok {
		out = append(out, fmt.Sprintf("%s: ≥ 0.9× the in-process row: %.2f× (%s)", name, v, verdict(v >= 0.9)))
	}
	if m.CPUOK && m.OK > 0 {
		us := float64(m.RedisCPU) / float64(time.Microsecond) / float64(m.OK)
		out = append(out, fmt.Sprintf("%s: Redis CPU ≤ 3 µs per request: %.1f µs (%s)", name, us, verdict(us <= 3)))
	}
	if m.Leases.ok && m.OK > 0 {
		v := m.Leases.charged / float64(m.OK)
		out = append(out, fmt.Sprintf("%s: ≤ 0.35 buckets charged per request: %.3f (%s)", name, v, verdict(v <= 0.35)))
	}
	return out
}

// defaultRows are the rows measured without -rows: every row but the
// lease_ttl 1s one, a setting to try, not the product's.
func defaultRows() []string {
	return slices.DeleteFunc(allRows(), func(id string) bool { return id == rowRedisTTL1 || slices.Contains(policyRows(), id) })
}

// shellArgs joins args as a shell would read them back: an empty argument
// (-conns "") or one with spaces is quoted.
func shellArgs(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		if a == "" || strings.ContainsAny(a, " \t'\"") {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}
