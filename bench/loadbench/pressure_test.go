package main

import (
	"io"
	"strings"
	"testing"
	"time"
)

// TestPressureOptionAndTable: -pressure takes busy and quota only, and the
// table sums each row's refusals and gives its share of 200/s against the
// same repetition without pressure.
func TestPressureOptionAndTable(t *testing.T) {
	o, err := parseOptions([]string{"-pressure", "busy, quota"}, io.Discard)
	if err != nil || strings.Join(o.pressure, ",") != "busy,quota" {
		t.Fatalf("%v %v", o.pressure, err)
	}
	if _, err := parseOptions([]string{"-pressure", "hot"}, io.Discard); err == nil {
		t.Fatal("-pressure hot accepted")
	}
	res := &results{opts: options{reps: 2, duration: time.Second}}
	for rep, rps := range [][2]float64{{1000, 400}, {2000, 1000}} {
		res.pressure = append(res.pressure,
			pressureFigure{row: rowGatewayRedis, mode: pressureNone, rep: rep, m: measurement{RPS: rps[0], Requests: 10}},
			pressureFigure{row: rowGatewayRedis, mode: pressureBusy, rep: rep, m: measurement{RPS: rps[1], Requests: 10},
				unavailable: 3, status503: 4, opened: 1})
	}
	table := res.pressureTable()
	for _, want := range []string{
		"| 4 vendorgate, Redis limiter | none | 1500 | – | 20 | 0 | 0 | 0 |",
		"| 4 vendorgate, Redis limiter | busy | 700 | 0.45 | 20 | 6 | 8 | 2 |",
	} {
		if !strings.Contains(table, want) {
			t.Fatalf("table lacks %q:\n%s", want, table)
		}
	}
}
