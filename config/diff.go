package config

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Change is one setting whose value differs between two configurations,
// named as the file names it (limits.vendor.reads.rate). Old and New are
// as -check prints them: a secret is never shown (Secret is then true and
// both read "(secret)"), and a URL's password is hidden.
type Change struct {
	Setting  string
	Old, New string
	Secret   bool
}

// String is the change for a log line: "setting: old -> new", or
// "setting: changed (secret)".
func (c Change) String() string {
	if c.Secret {
		return c.Setting + ": changed (secret)"
	}
	return c.Setting + ": " + c.Old + " -> " + c.New
}

// Diff lists the settings that differ between old and new, two pointers to
// one configuration type (*Gateway, *Backend), sorted by name. A setting
// that only one of them holds reads "(unset)" on the other side. A secret
// (a secret:"true" field, or a URL whose password alone changed) is
// compared on its value and listed without it.
func Diff(old, new any) ([]Change, error) {
	if reflect.TypeOf(old) != reflect.TypeOf(new) {
		return nil, fmt.Errorf("config diff: %T and %T", old, new)
	}
	var flat [4]map[string]string // old, new: values as set, then as shown
	for i, cfg := range []any{old, new} {
		var err error
		if flat[i], err = flatten(cfg); err != nil {
			return nil, err
		}
		if flat[2+i], err = flatten(masked(cfg)); err != nil {
			return nil, err
		}
	}
	names := map[string]bool{}
	for _, m := range flat[:2] {
		for k := range m {
			names[k] = true
		}
	}
	var out []Change
	for name := range names {
		o, oOK := flat[0][name]
		n, nOK := flat[1][name]
		if o == n && oOK == nOK {
			continue
		}
		c := Change{Setting: name, Old: shown(flat[2], name), New: shown(flat[3], name)}
		if c.Old == c.New {
			c.Secret, c.Old, c.New = true, "(secret)", "(secret)"
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Setting < out[j].Setting })
	return out, nil
}

func shown(m map[string]string, name string) string {
	if v, ok := m[name]; ok {
		return v
	}
	return "(unset)"
}

// masked is a copy of cfg with its secrets masked, as Print shows it.
func masked(cfg any) any {
	c := reflect.New(reflect.TypeOf(cfg).Elem())
	c.Elem().Set(reflect.ValueOf(cfg).Elem())
	maskSecrets(c.Elem())
	return c.Interface()
}

// flatten is cfg's YAML form as setting name -> value: a mapping's keys
// joined by dots, a list of mappings by index (limits.policies[1].rate),
// a list of values whole ([a, b]).
func flatten(cfg any) (map[string]string, error) {
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	var doc any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	out := map[string]string{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				name := k
				if prefix != "" {
					name = prefix + "." + k
				}
				walk(name, e)
			}
		case []any:
			scalars := true
			for _, e := range x {
				switch e.(type) {
				case map[string]any, []any:
					scalars = false
				}
			}
			if !scalars {
				for i, e := range x {
					walk(fmt.Sprintf("%s[%d]", prefix, i), e)
				}
				return
			}
			s := make([]string, len(x))
			for i, e := range x {
				s[i] = fmt.Sprint(e)
			}
			out[prefix] = "[" + strings.Join(s, ", ") + "]"
		case nil:
			out[prefix] = "(unset)"
		default:
			out[prefix] = fmt.Sprint(x)
		}
	}
	walk("", doc)
	return out, nil
}
