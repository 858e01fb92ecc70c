package config

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"vendorgate/shared/apikey"
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

// checkSigningSecrets validates key_signing_secrets: at least one, each at
// least apikey.MinSigningSecretLen characters of UTF-8, none repeated, none
// the internal token (the key-signing secret is a secret of its own:
// rotating the internal token must not invalidate every key).
func checkSigningSecrets(secrets List, internalToken, envName, peer string) error {
	if len(secrets) == 0 {
		return fmt.Errorf("set at least one secret of %d or more characters (%s, comma-separated; the first signs, any verifies), the same list as the %s", apikey.MinSigningSecretLen, envName, peer)
	}
	seen := make(map[string]bool, len(secrets))
	for i, s := range secrets {
		switch {
		case len(s) < apikey.MinSigningSecretLen || !utf8.ValidString(s):
			return fmt.Errorf("secret %d of %d is shorter than %d characters (%s): generate one with `openssl rand -base64 32`", i+1, len(secrets), apikey.MinSigningSecretLen, envName)
		case s == internalToken:
			return fmt.Errorf("secret %d of %d is the internal token: use a secret of its own, so rotating the internal token does not invalidate every key (%s)", i+1, len(secrets), envName)
		case seen[s]:
			return fmt.Errorf("secret %d of %d repeats an earlier one (%s)", i+1, len(secrets), envName)
		}
		seen[s] = true
	}
	return nil
}
