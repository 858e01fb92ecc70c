package policy

import (
	"strings"
	"testing"
	"time"
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
