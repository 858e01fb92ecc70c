package limit

import (
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
	if len(b.Names) != 1 || b.Names[0] != (Bucket{Key: "vg:{v:v1}:reads", Twin: "vg:{v:v1}:reads:twin"}) {
		t.Fatalf("defaults only: %+v", b.Names)
	}
	l := LayoutOf([]*Table{def, over}, nil)
	b = l.Buckets("v1", "k1")
	if len(b.Names) != 2 || b.Names[1] != (Bucket{Key: "vg:{v:v1}:k:k1:reads", Twin: "vg:{v:v1}:k:k1:reads:twin"}) {
		t.Fatalf("with an override enabling key-reads: %+v", b.Names)
	}
	if LayoutOf([]*Table{def, over}, l) != l {
		t.Fatal("the same tables made another layout")
	}
	if LayoutOf([]*Table{def}, l) == l {
		t.Fatal("a layout naming fewer rows is the previous one")
	}
}
