package usage

import (
	"strconv"
	"testing"
	"time"
)

// BenchmarkCollect10kVendors is one flush's collection of 10,000 vendors,
// each counted once since the last: the rows a flush builds (B/op) and the
// time it holds the recorder's lock for them.
func BenchmarkCollect10kVendors(b *testing.B) {
	r, err := New(testOptions(NewLocal(nil), nil))
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	cs := make([]*Counter, 10000)
	for i := range cs {
		cs[i] = r.For("vendor-" + strconv.Itoa(i))
	}
	at := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		for _, c := range cs {
			c.Allowed(Reads)
		}
		if d := r.collect(at); d == nil || len(d.Rows) != len(cs) {
			b.Fatal("not every vendor collected")
		}
	}
}
