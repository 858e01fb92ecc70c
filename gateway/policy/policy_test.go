package policy

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// A layout of tables names only the rows some table checks: a row off in
// the defaults but on in an override is named, a row off everywhere not.
func TestLayoutOfNamesCheckedRows(t *testing.T) {
	on := Rate{Limit: 10, Period: time.Minute}
	rows := func(keyReads Rate) []Policy {
		r := on
		r.Name = "reads"
		keyReads.Name = "key-reads"
		orders := Rate{Name: "orders"}
		return []Policy{{Rate: r, Class: "reads"}, {Rate: keyReads, Scope: PerKey, Class: "reads"}, {Rate: orders, Class: "orders"}}
	}
	classes := [][]string{{"reads"}, {"orders"}}
	def, err := NewTable(rows(Rate{}), classes)
	if err != nil {
		t.Fatal(err)
	}
	over, err := NewTable(rows(on), classes)
	if err != nil {
		t.Fatal(err)
	}
	b := LayoutOf([]*Table{def}, nil).Buckets("v1", "k1")
	if b.Len() != 1 || b.Name(0) != (Bucket{Key: "vg:{v:v1}:reads", Twin: "vg:{v:v1}:reads:twin"}) {
		t.Fatalf("defaults only: %d rows, %+v", b.Len(), b.Name(0))
	}
	l := LayoutOf([]*Table{def, over}, nil)
	b = l.Buckets("v1", "k1")
	if b.Len() != 2 || b.Name(1) != (Bucket{Key: "vg:{v:v1}:k:k1:reads", Twin: "vg:{v:v1}:k:k1:reads:twin"}) {
		t.Fatalf("with an override enabling key-reads: %d rows, %+v", b.Len(), b.Name(1))
	}
	long := strings.Repeat("v", 70000)
	if b := l.Buckets(long, "k1"); b.Name(1) != (Bucket{Key: "vg:{v:" + long + "}:k:k1:reads", Twin: "vg:{v:" + long + "}:k:k1:reads:twin"}) ||
		b.Name(0).Key != "vg:{v:"+long+"}:reads" || b.Len() != 2 {
		t.Fatal("names past 64 KiB are not the names")
	}
	if LayoutOf([]*Table{def, over}, l) != l {
		t.Fatal("the same tables made another layout")
	}
	if LayoutOf([]*Table{def}, l) == l {
		t.Fatal("a layout naming fewer rows is the previous one")
	}
}

// A quota or a sliding window row is planned apart from the GCRA checks
// (package window decides it), out of the plan's RateLimit-Policy value
// (the gateway appends it with its window's seconds), and counts against
// the route's MaxChecks with them.
func TestWindowedRowsPlannedApart(t *testing.T) {
	rows := []Policy{
		{Rate: Rate{Name: "orders", Limit: 10, Period: time.Minute}, Class: "orders"},
		{Rate: Rate{Name: "orders-day", Limit: 1000, Period: 24 * time.Hour, Kind: Quota, Calendar: Calendar{Days: 1}}, Class: "orders"},
		{Rate: Rate{Name: "strict", Limit: 5, Period: time.Minute, Kind: Sliding}, Class: "orders"},
	}
	tab, err := NewTable(rows, [][]string{{"orders"}, {"reads"}})
	if err != nil {
		t.Fatal(err)
	}
	p := tab.Plan(0)
	b := NewLayout(rows, nil).Buckets("v1", "k1")
	var gcra, win Checks
	p.Checks(&gcra, b)
	p.Windows(&win, b)
	if gcra.Count != 1 || gcra.List[0].Rate.Name != "orders" || string(p.Policy) != `"orders";q=10;w=60` {
		t.Fatalf("GCRA checks %d %q", gcra.Count, p.Policy)
	}
	if !p.Windowed() || win.Count != 2 || win.List[0].Key != "vg:{v:v1}:orders-day" || win.List[1].Policy != 2 || win.List[1].Rate.Kind != Sliding {
		t.Fatalf("windowed checks %+v", win)
	}
	if tab.Plan(1).Windowed() {
		t.Fatal("reads has no windowed row")
	}
	// A twin on orders (2 checks) and a windowed row in every other place:
	// past MaxChecks, in a full table.
	rows[0].Twin = Rate{Limit: 5, Period: time.Minute}
	for len(rows) < MaxPolicies {
		r := rows[2]
		r.Name = "strict-" + strconv.Itoa(len(rows))
		rows = append(rows, r)
	}
	if _, err := NewTable(rows, [][]string{{"orders"}}); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("more than %d limits", MaxChecks)) {
		t.Fatalf("%d limits on a route: %v", MaxPolicies+1, err)
	}
}

// TestBucketsPackTheirSpans: a key's bucket names keep where each row's
// name is inside their one string: a named row after an unnamed one, the
// unnamed one empty, every row past the last named empty, the same names
// as NewLayout's all-named layout gives for the named rows, in at most 48
// bytes besides the string.
func TestBucketsPackTheirSpans(t *testing.T) {
	on := Rate{Limit: 10, Period: time.Minute}
	rows := []Policy{{Rate: Rate{Name: "reads", Limit: 10, Period: time.Minute}, Class: "reads"},
		{Rate: Rate{Name: "key-reads"}, Scope: PerKey, Class: "reads"},
		{Rate: Rate{Name: "orders", Limit: on.Limit, Period: on.Period}, Class: "orders"},
		{Rate: Rate{Name: "key-orders"}, Scope: PerKey, Class: "orders"}}
	tab, err := NewTable(rows, [][]string{{"reads"}, {"orders"}})
	if err != nil {
		t.Fatal(err)
	}
	b := LayoutOf([]*Table{tab}, nil).Buckets("7d9f2a4e-1b3c-4d5e-8f60-718293a4b5c6", "k1")
	all := NewLayout(rows, nil).Buckets("7d9f2a4e-1b3c-4d5e-8f60-718293a4b5c6", "k1")
	want := []Bucket{all.Name(0), {}, all.Name(2), {}}
	if want[0].Key != "vg:{v:7d9f2a4e-1b3c-4d5e-8f60-718293a4b5c6}:reads" || all.Name(1).Key != "vg:{v:7d9f2a4e-1b3c-4d5e-8f60-718293a4b5c6}:k:k1:reads" ||
		want[2].Twin != "vg:{v:7d9f2a4e-1b3c-4d5e-8f60-718293a4b5c6}:orders:twin" {
		t.Fatalf("all named: %+v %+v %+v", want[0], all.Name(1), want[2])
	}
	for i := range MaxPolicies {
		var w Bucket
		if i < len(want) {
			w = want[i]
		}
		if got := b.Name(i); got != w {
			t.Fatalf("row %d: %+v, want %+v", i, got, w)
		}
	}
	if b.Len() != 3 || all.Len() != 4 {
		t.Fatalf("Len %d and %d, want 3 and 4", b.Len(), all.Len())
	}
	if size := unsafe.Sizeof(Buckets{}); size > 32 {
		t.Fatalf("Buckets take %d bytes, want at most 32 (a size class of their own)", size)
	}
}
