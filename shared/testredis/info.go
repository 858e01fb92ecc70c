package testredis

import (
	"strconv"
	"strings"
	"testing"
)

// Info is an INFO reply read as its "name:value" lines, by name.
type Info map[string]string

// ParseInfo reads an INFO reply of any sections.
func ParseInfo(s string) Info {
	out := Info{}
	for _, l := range strings.Split(s, "\n") {
		if name, v, ok := strings.Cut(strings.TrimSpace(l), ":"); ok && !strings.HasPrefix(name, "#") {
			out[name] = v
		}
	}
	return out
}

// Info asks s for sections of INFO (CPU seconds, memory, command calls).
func (s *Server) Info(tb testing.TB, sections ...string) Info {
	tb.Helper()
	return ParseInfo(s.Do(tb, append([]string{"INFO"}, sections...)...))
}

// Sum is the sum of the named numeric fields, such as used_cpu_user and
// used_cpu_sys; ok is false when none of them is in the reply.
func (i Info) Sum(names ...string) (sum float64, ok bool) {
	for _, n := range names {
		if v, found := i[n]; found {
			f, _ := strconv.ParseFloat(v, 64)
			sum, ok = sum+f, true
		}
	}
	return sum, ok
}

// CPU is the seconds Redis spent on the CPU, user and system.
func (i Info) CPU() float64 {
	s, _ := i.Sum("used_cpu_user", "used_cpu_sys")
	return s
}

// Calls is how often each command was called (INFO commandstats), by the
// command's name in lower case.
func (i Info) Calls() map[string]int64 {
	out := map[string]int64{}
	for name, v := range i {
		cmd, ok := strings.CutPrefix(name, "cmdstat_")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(v, ",") {
			if c, ok := strings.CutPrefix(kv, "calls="); ok {
				if n, err := strconv.ParseInt(c, 10, 64); err == nil {
					out[cmd] = n
				}
			}
		}
	}
	return out
}

// Scripts is the script calls, EVALSHA and EVAL.
func (i Info) Scripts() int64 {
	c := i.Calls()
	return c["evalsha"] + c["eval"]
}
