package config

import (
	"strings"

	"go.yaml.in/yaml/v3"
)

// List is a list of strings written in YAML either as a sequence or as one
// comma-separated string, the way its environment variable is written.
type List []string

// UnmarshalYAML accepts "a,b" as well as [a, b].
func (l *List) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		var s string
		if err := n.Decode(&s); err != nil {
			return err
		}
		*l = splitList(s)
		return nil
	}
	var items []string
	if err := n.Decode(&items); err != nil {
		return err
	}
	*l = items
	return nil
}

func splitList(s string) List {
	var out List
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
