// Package wrkout reads the one summary line the benchmark tools' wrk Lua
// scripts print: a marker, then name=value pairs of whole numbers.
package wrkout

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
)

// Fields finds the line of out that starts with marker and returns its
// name=value pairs. It refuses a line without a positive duration_us.
func Fields(out, marker string) (map[string]int64, error) {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), marker+" ")
		if !ok {
			continue
		}
		v := map[string]int64{}
		for _, kv := range strings.Fields(rest) {
			k, s, _ := strings.Cut(kv, "=")
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("wrk output %q: %w", kv, err)
			}
			v[k] = n
		}
		if v["duration_us"] <= 0 {
			return nil, fmt.Errorf("wrk output without a duration: %q", rest)
		}
		return v, nil
	}
	return nil, fmt.Errorf("no %s line in wrk's output:\n%s", marker, out)
}
