package main

import (
	"bufio"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// term is one part of a step's count: the inclusive cost of one function
// (incl, sign -1 to take a part out again), or the own cost of every
// function whose name starts with a prefix (self: for code that waits on
// a socket or a lock, whose inclusive cost would take in what ran
// meanwhile).
type term struct {
	self bool
	sign int64
	name string
}

func incl(name string) term     { return term{sign: 1, name: name} }
func minus(name string) term    { return term{sign: -1, name: name} }
func selfOf(prefix string) term { return term{self: true, sign: 1, name: prefix} }

// step is one step of a gateway request (gateway/flow.go), counted in the
// functions that do it.
type step struct {
	name  string
	what  string
	terms []term
}

const gwPkg = "vendorgate/gateway"

// steps are the request's steps in flow order. Each is a function that
// does not wait (its inclusive cost is its own work), or the own cost of
// the code that does.
var steps = []step{
	{"connection", "the listener's wrappers (idleconn, barelf, connlimit, edge), their own code", []term{
		selfOf("vendorgate/shared/idleconn."), selfOf("vendorgate/shared/barelf."), selfOf(gwPkg + "/connlimit."), selfOf(gwPkg + "/edge.")}},
	{"route", "paramroute and fasthttp/router, their own code", []term{
		selfOf(gwPkg + "/paramroute."), selfOf("github.com/fasthttp/router.")}},
	{"request id", "requestid.(*Source).Set", []term{incl(gwPkg + "/requestid.(*Source).Set")}},
	{"client address", "clientip.(*Resolver).Resolve", []term{incl(gwPkg + "/clientip.(*Resolver).Resolve")}},
	{"key", "the own code of authenticate, the authenticator and key cache, the cache's tag (auth.Tag, its maphash sums), apikey and SHA-256 (its AVX2 code under valgrind; on a miss)", []term{
		selfOf(gwPkg + ".(*Gateway).authenticate"), selfOf(gwPkg + "/auth.(*Authenticator)."), selfOf(gwPkg + "/auth.(*Cache)."),
		incl(gwPkg + "/auth.Tag"), selfOf("vendorgate/shared/apikey."), selfOf("crypto/sha256."), selfOf("crypto/internal/fips140/sha256.")}},
	{"throttle", "throttle.(*Throttle).Fail (a refused key only)", []term{incl(gwPkg + "/throttle.(*Throttle).Fail")}},
	{"account", "the own code of admit and of what it asks (the account's state, the policy table, the key's buckets)", []term{
		selfOf(gwPkg + ".(*Gateway).admit"), selfOf(gwPkg + ".(*snapshot)."), selfOf(gwPkg + "/auth.(*Identity).Buckets")}},
	{"limits: windows", "admission.(*Admitter).admitWindows", []term{incl(gwPkg + "/admission.(*Admitter).admitWindows")}},
	{"limits: rates", "the own code of admitRates and package limit (GCRA in process; leases and the call on Redis, which waits: an inclusive count would take in what ran meanwhile)", []term{
		selfOf(gwPkg + "/admission.(*Admitter).admitRates"), selfOf(gwPkg + "/limit.")}},
	{"limits: Redis pipeline", "the own code of package redisconn (the pipeline, its sender and reader)", []term{
		selfOf(gwPkg + "/limit/redisconn.")}},
	// Own code, not admitInFlight's inclusive count: that took in the
	// runtime's write barriers on its store of the slot and type
	// assertions missing their cache, which follow the collector's pace
	// (12 to 71 instructions a request in runs of the same code).
	{"limits: in flight", "the own code of admitInFlight and package inflight (the vendor's count taken, and given back when the answer is done)", []term{
		selfOf(gwPkg + "/admission.(*Admitter).admitInFlight"), selfOf(gwPkg + "/inflight.")}},
	{"limits: slots", "admission.(*Admitter).admitSlots", []term{incl(gwPkg + "/admission.(*Admitter).admitSlots")}},
	{"books", "admission.(*Books).Admission: decision metrics, usage", []term{incl(gwPkg + "/admission.(*Books).Admission")}},
	{"proxy", "prepareRequest, stripResponse, and the own code of proxy and the breaker", []term{
		incl(gwPkg + "/proxy.prepareRequest"), incl(gwPkg + "/proxy.stripResponse"),
		selfOf(gwPkg + "/proxy.(*Proxy)."), selfOf(gwPkg + "/breaker."), selfOf("github.com/sony/gobreaker")}},
	{"headers", "setRateLimitHeaders, respond.Common, respond.SetKeyExpiration", []term{
		incl(gwPkg + ".setRateLimitHeaders"), incl(gwPkg + "/respond.Common"), incl(gwPkg + "/respond.SetKeyExpiration")}},
	{"metrics and log", "admin.(*Metrics).Request, ObserveRequest, the access log's check and line", []term{
		incl(gwPkg + "/admin.(*Metrics).Request"), incl(gwPkg + "/admin.(*Metrics).ObserveRequest"),
		incl("log/slog.(*Logger).Enabled"), incl(gwPkg + "/accesslog.Write")}},
}

// stepsNamed checks that each step's functions are in the test binary bin
// (its symbol table): a function renamed or moved, or inlined into every
// caller, would count nothing, and its step's budget could not fail.
func stepsNamed(bin string) error {
	f, err := elf.Open(bin)
	if err != nil {
		return err
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return fmt.Errorf("%s: %w", bin, err)
	}
	names := make([]string, len(syms))
	for i, s := range syms {
		names[i] = s.Name
	}
	return unnamedTerms(names)
}

// unnamedTerms is the error naming the steps' terms that match none of
// names (a term counted on a function's own cost matches by prefix).
func unnamedTerms(names []string) error {
	exact := make(map[string]bool, len(names))
	for _, n := range names {
		exact[n] = true
	}
	var missing []string
	for _, s := range steps {
		for _, t := range s.terms {
			found := exact[t.name]
			for i := 0; t.self && !found && i < len(names); i++ {
				found = strings.HasPrefix(names[i], t.name)
			}
			if !found {
				missing = append(missing, fmt.Sprintf("step %q: %s", s.name, t.name))
			}
		}
	}
	if len(missing) > 0 {
		return errors.New("functions no longer in the gateway's test binary (renamed, moved or inlined everywhere): name what does the step now in steps.go:\n  " + strings.Join(missing, "\n  "))
	}
	return nil
}

// count is the step's count of event ev in p.
func (s step) count(p *profile, ev int) int64 {
	var n int64
	for _, t := range s.terms {
		if t.self {
			n += p.selfWhere(ev, func(f string) bool { return strings.HasPrefix(f, t.name) })
			continue
		}
		n += t.sign * p.inclusive(t.name, ev)
	}
	return n
}

// budget is the most instructions a request may spend in one step of one
// row.
type budget struct {
	row, step string
	max       float64
}

// parseBudgets reads the budget table: "row<TAB>step<TAB>instructions",
// # comments.
func parseBudgets(r io.Reader) ([]budget, error) {
	var out []budget
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		l := strings.TrimSpace(sc.Text())
		if l == "" || l[0] == '#' {
			continue
		}
		f := strings.Split(l, "\t")
		if len(f) != 3 {
			return nil, fmt.Errorf("budgets line %d: want row, step and instructions, tab-separated: %q", line, l)
		}
		n, err := strconv.ParseFloat(f[2], 64)
		if err != nil {
			return nil, fmt.Errorf("budgets line %d: %w", line, err)
		}
		if !knownStep(f[1]) {
			return nil, fmt.Errorf("budgets line %d: no step %q", line, f[1])
		}
		out = append(out, budget{row: f[0], step: f[1], max: n})
	}
	return out, sc.Err()
}

func knownStep(name string) bool {
	for _, s := range steps {
		if s.name == name {
			return true
		}
	}
	return false
}

// overBudget lists the budgets that a row's steps (instructions per
// request, by row then step name) exceed; a row not measured this time
// is not checked.
func overBudget(budgets []budget, perStep map[string]map[string]float64) []string {
	var out []string
	for _, b := range budgets {
		got, ok := perStep[b.row]
		if !ok {
			continue // the row was not run this time (-rows)
		}
		if v := got[b.step]; v > b.max {
			out = append(out, fmt.Sprintf("%s: %s spends %.0f instructions a request, over its budget of %.0f", b.row, b.step, v, b.max))
		}
	}
	return out
}
