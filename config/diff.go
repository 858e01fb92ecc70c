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
	// Added and Removed: the setting (a row of the limits, most often) is
	// in the new configuration alone, or in the old one alone.
	Added, Removed bool
}

// String is the change for a log line: "setting: old -> new",
// "setting: added new", "setting: removed old", or
// "setting: changed (secret)".
func (c Change) String() string {
	switch {
	case c.Secret:
		return c.Setting + ": changed (secret)"
	case c.Added:
		return c.Setting + ": added " + c.New
	case c.Removed:
		return c.Setting + ": removed " + c.Old
	}
	return c.Setting + ": " + c.Old + " -> " + c.New
}

// Diff lists the settings that differ between old and new, two pointers to
// one configuration type (*Gateway, *Backend), sorted by name: a row of the
// limits is one setting with its effective values (see flatten). A setting
// that only one of them holds is Added or Removed. A secret
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
		c := Change{Setting: name, Old: shown(flat[2], name), New: shown(flat[3], name), Added: !oOK, Removed: !nOK}
		if c.Old == c.New && oOK && nOK {
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
// joined by dots, a list of mappings by index (backend_tls[1].ca_file), a
// list of values whole ([a, b]). A row of the limits is one setting, its
// values in flow style in the order -check prints them: limits.vendor.reads,
// limits.per_key.orders, limits.overrides.VENDOR, and limits.policies[NAME]
// (by name, so that a row added before another does not change it).
func flatten(cfg any) (map[string]string, error) {
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	out := map[string]string{}
	var walk func(prefix string, n *yaml.Node) error
	walk = func(prefix string, n *yaml.Node) error {
		if isRow(prefix) {
			s, err := flow(n)
			out[prefix] = s
			return err
		}
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				if err := walk(prefix, c); err != nil {
					return err
				}
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				name := n.Content[i].Value
				if prefix != "" {
					name = prefix + "." + name
				}
				if err := walk(name, n.Content[i+1]); err != nil {
					return err
				}
			}
		case yaml.SequenceNode:
			scalars := true
			for _, e := range n.Content {
				if e.Kind != yaml.ScalarNode {
					scalars = false
				}
			}
			if !scalars {
				for i, e := range n.Content {
					name := fmt.Sprintf("%s[%d]", prefix, i)
					if prefix == "limits.policies" {
						name = fmt.Sprintf("%s[%s]", prefix, rowName(e, i))
					}
					if err := walk(name, e); err != nil {
						return err
					}
				}
				return nil
			}
			s := make([]string, len(n.Content))
			for i, e := range n.Content {
				s[i] = e.Value
			}
			out[prefix] = "[" + strings.Join(s, ", ") + "]"
		default:
			if n.Tag == "!!null" {
				out[prefix] = "(unset)"
			} else {
				out[prefix] = n.Value
			}
		}
		return nil
	}
	return out, walk("", &doc)
}

// isRow says whether the setting named is a row of the limits, listed as
// one setting.
func isRow(name string) bool {
	switch name {
	case "limits.vendor.reads", "limits.vendor.orders", "limits.per_key.reads", "limits.per_key.orders":
		return true
	}
	if rest, ok := strings.CutPrefix(name, "limits.overrides."); ok {
		return !strings.Contains(rest, ".")
	}
	if rest, ok := strings.CutPrefix(name, "limits.policies["); ok {
		return strings.HasSuffix(rest, "]") && !strings.Contains(rest, ".")
	}
	return false
}

// rowName is a policy row's name, or its index when it has none.
func rowName(n *yaml.Node, i int) string {
	if n.Kind == yaml.MappingNode {
		for j := 0; j+1 < len(n.Content); j += 2 {
			if n.Content[j].Value == "name" && n.Content[j+1].Value != "" {
				return n.Content[j+1].Value
			}
		}
	}
	return fmt.Sprint(i)
}

// flow is n as one line of flow-style YAML: {rate: 5, period: 1m0s}.
func flow(n *yaml.Node) (string, error) {
	var style func(*yaml.Node)
	style = func(n *yaml.Node) {
		n.Style |= yaml.FlowStyle
		for _, c := range n.Content {
			style(c)
		}
	}
	style(n)
	b, err := yaml.Marshal(n)
	return strings.TrimSpace(string(b)), err
}
