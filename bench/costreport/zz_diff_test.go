package main

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
)

func per(t *testing.T, pre string) (map[string]float64, map[string]float64) {
	var ps [2]*profile
	for i, n := range []string{"5000", "15000"} {
		f, _ := os.Open(pre + "." + n + ".cg")
		ps[i], _ = parseCallgrind(f)
		f.Close()
	}
	self, inc := map[string]float64{}, map[string]float64{}
	for k := range ps[1].self {
		a := int64(0)
		if ps[0].self[k] != nil {
			a = ps[0].self[k][0]
		}
		self[k] = float64(ps[1].self[k][0]-a) / 1e4
	}
	for k := range ps[1].levels {
		inc[k] = float64(ps[1].inclusive(k, 0)-ps[0].inclusive(k, 0)) / 1e4
	}
	return self, inc
}

func TestZZDiff(t *testing.T) {
	a, b := os.Getenv("A"), os.Getenv("B")
	if a == "" {
		t.Skip()
	}
	sa, ia := per(t, a)
	sb, ib := per(t, b)
	type kv struct {
		k string
		v float64
	}
	var d []kv
	for k := range sb {
		d = append(d, kv{k, sb[k] - sa[k]})
	}
	sort.Slice(d, func(i, j int) bool { return d[i].v > d[j].v })
	for _, x := range d[:30] {
		fmt.Printf("%+9.1f %s\n", x.v, x.k)
	}
	for _, n := range []string{"vendorgate/gateway/backendapi.(*Client).PostUsage", "runtime.gcBgMarkWorker", "runtime.gcDrain", "vendorgate/gateway/usage.(*Backend).apply", "vendorgate/gateway/usage.(*Backend).flush", "runtime.bgsweep", "runtime.mallocgc"} {
		fmt.Printf("incl %s: %.1f -> %.1f\n", n, ia[n], ib[n])
	}
}

func TestZZFind(t *testing.T) {
	a := os.Getenv("F")
	if a == "" {
		t.Skip()
	}
	s, _ := per(t, a)
	for k, v := range s {
		if (strings.Contains(k, "sha256") || strings.Contains(k, "gateway/auth.") || strings.Contains(k, "apikey.") || strings.Contains(k, "authenticate")) && (v > 1 || v < -1) {
			fmt.Printf("%9.1f %s\n", v, k)
		}
	}
}
