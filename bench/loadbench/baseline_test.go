package main

import (
	"io"
	"slices"
	"testing"
)

// -baseline puts row 3b right after the gateway row, whatever -rows says,
// and only once.
func TestBaselineRowPlacement(t *testing.T) {
	cases := []struct {
		rows string
		want []string
	}{
		{"bare,gateway,gateway-redis", []string{rowBare, rowGateway, rowBaseline, rowGatewayRedis}},
		{"bare,gateway-redis,nginx", []string{rowBare, rowBaseline, rowGatewayRedis, rowNginx}},
		{"bare", []string{rowBare, rowBaseline}},
		{"gateway,baseline,bare", []string{rowGateway, rowBaseline, rowBare}},
	}
	for _, c := range cases {
		o, err := parseOptions([]string{"-baseline", "HEAD~1", "-rows", c.rows}, io.Discard)
		if err != nil {
			t.Fatalf("-rows %s: %v", c.rows, err)
		}
		if !slices.Equal(o.rows, c.want) {
			t.Errorf("-rows %s -baseline HEAD~1: rows %v, want %v", c.rows, o.rows, c.want)
		}
	}
	o, err := parseOptions([]string{"-rows", "bare,gateway"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(o.rows, rowBaseline) {
		t.Errorf("no -baseline, rows %v hold the baseline row", o.rows)
	}
}
