package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// A callgrind file as valgrind writes it: compressed names defined once
// then used by id, relative positions, a call's inclusive cost on the line
// after calls=, a recursion level ('2) and a call back into the same
// function.
const smallCallgrind = `# callgrind format
version: 1
creator: callgrind-3.19.0
pid: 42
cmd:  ./gateway.test
part: 1

desc: I1 cache: 32768 B, 64 B, 8-way associative
positions: line
events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw
summary: 1355 0 0 0 0 0 4 2 1

ob=(1) /tmp/gateway.test
fl=(1) /src/flow.go
fn=(1) vendorgate/gateway.(*Gateway).serveVendor
10 100 0 0 0 0 0 1 0 0
cfl=(2) /src/auth.go
cfn=(2) vendorgate/gateway.(*Gateway).authenticate
calls=1 20
+1 1000 0 0 0 0 0 2 1 0
+2 5
cfn=(4) vendorgate/gateway.(*Gateway).serveVendor'2
calls=1 12
+1 50
fn=(2)
20 700 0 0 0 0 0 1 1 0
cfn=(3) runtime.mallocgc
calls=2 30
* 300 0 0 0 0 0 0 0 1
fn=(3)
30 300 0 0 0 0 0 0 0 1
fn=(4)
12 50
`

func TestParseCallgrind(t *testing.T) {
	p, err := parseCallgrind(strings.NewReader(smallCallgrind))
	if err != nil {
		t.Fatal(err)
	}
	ir := p.event("Ir")
	if ir != 0 || p.event("DLmw") != 8 || p.event("nope") != -1 {
		t.Fatalf("events %v", p.events)
	}
	for _, c := range []struct {
		fn         string
		self, incl int64
	}{
		// serveVendor: its own 100 + 5, its call to authenticate (1000)
		// and to its second level (50).
		{"vendorgate/gateway.(*Gateway).serveVendor", 105, 1155},
		{"vendorgate/gateway.(*Gateway).serveVendor'2", 50, 50},
		{"vendorgate/gateway.(*Gateway).authenticate", 700, 1000},
		{"runtime.mallocgc", 300, 300},
	} {
		if p.self[c.fn] == nil {
			t.Fatalf("%s not read; functions: %v", c.fn, p.self)
		}
		if got := p.self[c.fn][ir]; got != c.self {
			t.Errorf("%s own Ir %d, want %d", c.fn, got, c.self)
		}
		if got := p.incl[c.fn][ir]; got != c.incl {
			t.Errorf("%s inclusive Ir %d, want %d", c.fn, got, c.incl)
		}
	}
	// Every level of a name: what a step adds up.
	if got := p.inclusive("vendorgate/gateway.(*Gateway).serveVendor", ir); got != 1205 {
		t.Errorf("serveVendor's levels' inclusive Ir %d, want 1205", got)
	}
	if got := p.total(ir); got != 1155 {
		t.Errorf("total Ir %d, want 1155", got)
	}
	ll := p.total(p.event("ILmr")) + p.total(p.event("DLmr")) + p.total(p.event("DLmw"))
	if ll != 4 {
		t.Errorf("LL misses %d, want 4", ll)
	}
	if got := p.selfWhere(ir, isRequestCode); got != 855 {
		t.Errorf("request code %d, want 855 (all but runtime.mallocgc)", got)
	}
}

func TestParseCallgrindRefusesACostOutsideAFunction(t *testing.T) {
	if _, err := parseCallgrind(strings.NewReader("events: Ir\n10 5\n")); err == nil {
		t.Fatal("a cost line before fn= parsed")
	}
	if _, err := parseCallgrind(strings.NewReader("events: Ir\nfn=(1) f\n10 x\n")); err == nil {
		t.Fatal("a cost that is not a number parsed")
	}
}

// A step that waits: f's second level ran while f waited in w (another
// request's goroutine on the same thread), so f's inclusive cost holds
// it twice over: once in w's, once as f'2's own. The step takes every
// level of f less every level of w.
func TestStepCount(t *testing.T) {
	p, err := parseCallgrind(strings.NewReader(`events: Ir
fn=(1) a.f
1 10
cfn=(2) a.w
calls=1 1
1 500
fn=(2)
1 20
cfn=(3) a.f'2
calls=1 1
1 30
cfn=(4) runtime.park
calls=1 1
1 450
fn=(3)
1 10
cfn=(5) a.w'2
calls=1 1
1 20
fn=(5)
1 20
fn=(4)
1 450
fn=(6) b.h
1 40
`))
	if err != nil {
		t.Fatal(err)
	}
	s := step{terms: []term{incl("a.f"), minus("a.w"), selfOf("b."), incl("missing")}}
	// a.f: 10 + 500, a.f'2: 10 + 20; less a.w (500) and a.w'2 (20); b.h 40.
	if got := s.count(p, 0); got != 10+10+40 {
		t.Errorf("count %d, want 60 (f's own work at both levels, and b.h)", got)
	}
}

func TestBudgets(t *testing.T) {
	bs, err := parseBudgets(strings.NewReader("# comment\ngateway\tkey\t3000\ngateway\troute\t200\nother\tkey\t10\n"))
	if err != nil {
		t.Fatal(err)
	}
	over := overBudget(bs, map[string]map[string]float64{"gateway": {"key": 3100, "route": 150}})
	if len(over) != 1 || !strings.Contains(over[0], "gateway: key spends 3100 instructions a request, over its budget of 3000") {
		t.Errorf("over budget: %q", over)
	}
	if over := overBudget(bs, map[string]map[string]float64{"gateway": {"key": 3000, "route": 200}}); len(over) != 0 {
		t.Errorf("at the budget reported over: %q", over)
	}
	for _, bad := range []string{"gateway\tnosuchstep\t10\n", "gateway key 10\n", "gateway\tkey\tmany\n"} {
		if _, err := parseBudgets(strings.NewReader(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if _, err := parseBudgets(bytes.NewReader(budgetTable)); err != nil {
		t.Errorf("budgets.txt: %v", err)
	}
}

func TestParseStrace(t *testing.T) {
	const out = `% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 60.00    0.006000           2      3000           write
 30.00    0.003000           1      3000      1000 read
 10.00    0.001000           1       500           futex
------ ----------- ----------- --------- --------- ----------------
100.00    0.010000           1      6500      1000 total
`
	got, err := parseStrace(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got["write"] != 3000 || got["read"] != 3000 || got["futex"] != 500 {
		t.Errorf("%v", got)
	}
}

func TestParseBenchLine(t *testing.T) {
	out := "goos: linux\nBenchmarkServedSerial/gateway-redis \t   15000\t     66335 ns/op\t         0.2585 rediscmds/op\t         0.06450 scripts/op\t      98 B/op\t       2 allocs/op\nPASS\n"
	bl, err := parseBenchLine(out)
	if err != nil {
		t.Fatal(err)
	}
	if bl["allocs/op"] != 2 || bl["B/op"] != 98 || bl["scripts/op"] != 0.0645 || bl["rediscmds/op"] != 0.2585 {
		t.Errorf("%v", bl)
	}
	if _, err := parseBenchLine("PASS\n"); err == nil {
		t.Error("no result line parsed")
	}
}

func TestRatioAndPair(t *testing.T) {
	if got := ratio(71400, 42500, true); got != " (1.68x)" {
		t.Errorf("ratio %q", got)
	}
	for v, want := range map[float64]string{71400: "71.4k", 5853200: "5.85M", 2170: "2.17k", 168: "168"} {
		if got := kilo(v); got != want {
			t.Errorf("kilo(%v) %q, want %q", v, got, want)
		}
	}
	if p, err := pair("5000,15000"); err != nil || p != [2]int{5000, 15000} {
		t.Errorf("pair %v %v", p, err)
	}
	for _, bad := range []string{"15000,5000", "5000", "0,10", "a,b"} {
		if _, err := pair(bad); err == nil {
			t.Errorf("pair %q accepted", bad)
		}
	}
}

// A step's function renamed or moved counts nothing: the report refuses
// to run rather than hold that step to a budget it cannot exceed.
func TestUnnamedTerms(t *testing.T) {
	var names []string
	for _, s := range steps {
		for _, tm := range s.terms {
			names = append(names, tm.name+"x") // a prefix term matches a longer name
			if !tm.self {
				names[len(names)-1] = tm.name
			}
		}
	}
	if err := unnamedTerms(names); err != nil {
		t.Fatalf("every term named: %v", err)
	}
	books := gwPkg + "/admission.(*Books).Admission"
	i := slices.Index(names, books)
	if i < 0 {
		t.Fatalf("%s is not a term", books)
	}
	names[i] = gwPkg + "/books.(*Books).Admission" // the function as it was named before it moved
	err := unnamedTerms(names)
	if err == nil || !strings.Contains(err.Error(), `step "books": `+books) {
		t.Fatalf("a moved function: %v, want the step and its term named", err)
	}
}
