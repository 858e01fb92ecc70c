package main

import (
	"fmt"
	"os"
	"testing"
)

func TestZZProbe(t *testing.T) {
	pre := os.Getenv("PROBE")
	if pre == "" {
		t.Skip()
	}
	var ps [2]*profile
	for i, n := range []string{"5000", "15000"} {
		f, err := os.Open(pre + "." + n + ".cg")
		if err != nil {
			t.Fatal(err)
		}
		ps[i], err = parseCallgrind(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	ir := ps[0].event("Ir")
	fmt.Printf("whole %.0f req %.0f\n", float64(ps[1].total(ir)-ps[0].total(ir))/1e4, float64(ps[1].selfWhere(ir, isRequestCode)-ps[0].selfWhere(ir, isRequestCode))/1e4)
	for _, s := range steps {
		fmt.Printf("%-20s %8.1f\n", s.name, float64(s.count(ps[1], ir)-s.count(ps[0], ir))/1e4)
	}
}
