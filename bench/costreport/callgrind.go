package main

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// profile is one callgrind output file read by function: each function's
// own cost (its cost lines) and its inclusive cost (its own plus the
// inclusive cost callgrind recorded for each call it made), per event.
// Callgrind names a function entered again while it is on the call stack
// name'2, name'3...: with goroutines, that happens when a request's
// goroutine waits (a key lookup, a Redis reply) and the scheduler runs
// another request's on the same thread; the waiting function's inclusive
// cost then takes in everything that ran meanwhile. levels sums a name
// over its levels; a step that may wait subtracts the functions it waits
// in (steps.go).
type profile struct {
	events []string
	self   map[string][]int64
	incl   map[string][]int64
	levels map[string][]string // a name without its level: the names of its levels
}

// inclusive is the inclusive cost of event i of every level of name.
func (p *profile) inclusive(name string, i int) int64 {
	var n int64
	for _, l := range p.levels[name] {
		n += p.incl[l][i]
	}
	return n
}

// event is the index of name among the profile's events, -1 when absent.
func (p *profile) event(name string) int {
	for i, e := range p.events {
		if e == name {
			return i
		}
	}
	return -1
}

// total is the sum over every function of its own cost of event i.
func (p *profile) total(i int) int64 {
	var n int64
	for _, c := range p.self {
		n += c[i]
	}
	return n
}

// selfWhere is the own cost of event i of the functions keep selects.
func (p *profile) selfWhere(i int, keep func(string) bool) int64 {
	var n int64
	for f, c := range p.self {
		if keep(f) {
			n += c[i]
		}
	}
	return n
}

// parseCallgrind reads a callgrind output file (format version 1, name
// compression "fn=(id) name" then "fn=(id)", position compression "+n",
// "-n", "*").
func parseCallgrind(r io.Reader) (*profile, error) {
	p := &profile{self: map[string][]int64{}, incl: map[string][]int64{}, levels: map[string][]string{}}
	names := map[string]string{} // compressed function ids: fn, cfn and jfi share them
	npos := 1
	var fn, callee string
	inCall := false // the next cost line is a call's inclusive cost
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	line := 0
	for sc.Scan() {
		line++
		l := sc.Text()
		if l == "" || l[0] == '#' {
			continue
		}
		if key, v, ok := strings.Cut(l, ":"); ok && isHeader(key) {
			switch key {
			case "events":
				p.events = strings.Fields(v)
			case "positions":
				npos = len(strings.Fields(v))
			}
			continue
		}
		if key, v, ok := strings.Cut(l, "="); ok && isSpec(key) {
			switch key {
			case "fn":
				fn = funcName(names, v)
				if p.self[fn] == nil {
					p.self[fn] = make([]int64, len(p.events))
					p.incl[fn] = make([]int64, len(p.events))
					base := withoutLevel(fn)
					p.levels[base] = append(p.levels[base], fn)
				}
			case "cfn", "cfni":
				callee = funcName(names, v)
			case "calls":
				inCall = true
			}
			continue
		}
		if fn == "" {
			return nil, fmt.Errorf("line %d: a cost before any fn=", line)
		}
		costs, err := costLine(l, npos, len(p.events))
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if inCall {
			inCall = false
			if callee == fn {
				continue // a call to itself: already in fn's own cost
			}
			add(p.incl[fn], costs)
			continue
		}
		add(p.self[fn], costs)
		add(p.incl[fn], costs)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(p.events) == 0 {
		return nil, fmt.Errorf("no events: line not found")
	}
	return p, nil
}

func isHeader(key string) bool {
	switch key {
	case "version", "creator", "pid", "cmd", "part", "desc", "positions", "events", "summary", "totals", "thread":
		return true
	}
	return false
}

func isSpec(key string) bool {
	switch key {
	case "ob", "fl", "fi", "fe", "fn", "cob", "cfl", "cfi", "cfn", "calls", "jump", "jcnd", "jfi", "jfn":
		return true
	}
	return false
}

// funcName resolves "(id) name" (defining id) or "(id)" (using it).
func funcName(names map[string]string, v string) string {
	if !strings.HasPrefix(v, "(") {
		return v
	}
	end := strings.IndexByte(v, ')')
	if end < 0 {
		return v
	}
	id, rest := v[:end+1], strings.TrimSpace(v[end+1:])
	if rest == "" {
		return names[id]
	}
	names[id] = rest
	return rest
}

// withoutLevel is name without callgrind's recursion level ('2, '3...).
func withoutLevel(name string) string {
	if i := strings.LastIndexByte(name, '\''); i > 0 {
		if _, err := strconv.Atoi(name[i+1:]); err == nil {
			return name[:i]
		}
	}
	return name
}

// costLine reads a cost line: npos positions, then up to n costs.
func costLine(l string, npos, n int) ([]int64, error) {
	f := strings.Fields(l)
	if len(f) < npos {
		return nil, fmt.Errorf("cost line %q: fewer than %d positions", l, npos)
	}
	out := make([]int64, n)
	for i, s := range f[npos:] {
		if i >= n {
			return nil, fmt.Errorf("cost line %q: more than %d costs", l, n)
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("cost line %q: %w", l, err)
		}
		out[i] = v
	}
	return out, nil
}

func add(dst, src []int64) {
	for i := range src {
		dst[i] += src[i]
	}
}
