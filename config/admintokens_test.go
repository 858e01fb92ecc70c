package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestNamedAdminTokens: admin_token alone is one token named "admin";
// admin_tokens add named ones (from the environment too); one can be
// removed without the others; bad entries are refused naming the entry.
func TestNamedAdminTokens(t *testing.T) {
	base := map[string]string{"BACKEND_INTERNAL_TOKEN": "0123456789abcdef",
		"BACKEND_KEY_SIGNING_SECRETS": testSigning}
	load := func(kv ...string) (*Backend, error) {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return LoadBackend("", envMap(m))
	}
	names := func(b *Backend) []string {
		ts, err := b.NamedAdminTokens()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, tk := range ts {
			out = append(out, tk.Name+"="+tk.Token)
		}
		return out
	}
	b, err := load("BACKEND_ADMIN_TOKEN", "single-admin-token-0123")
	if err != nil {
		t.Fatal(err)
	}
	if got := names(b); !reflect.DeepEqual(got, []string{"admin=single-admin-token-0123"}) {
		t.Errorf("admin_token alone: %v", got)
	}
	if b.AuditRetention != 400*24*time.Hour {
		t.Errorf("audit_retention default %s", b.AuditRetention)
	}
	b, err = load("BACKEND_ADMIN_TOKENS", "alice:alice-token-0123456789,bob:bob-token-0123456789", "BACKEND_AUDIT_RETENTION", "30d")
	if err != nil {
		t.Fatal(err)
	}
	if got := names(b); !reflect.DeepEqual(got, []string{"alice=alice-token-0123456789", "bob=bob-token-0123456789"}) {
		t.Errorf("admin_tokens: %v", got)
	}
	if b.AuditRetention != 30*24*time.Hour {
		t.Errorf("audit_retention 30d: %s", b.AuditRetention)
	}
	// bob's entry removed: alice's token is the same as before.
	b, err = load("BACKEND_ADMIN_TOKENS", "alice:alice-token-0123456789")
	if err != nil || !reflect.DeepEqual(names(b), []string{"alice=alice-token-0123456789"}) {
		t.Errorf("bob removed: %v", err)
	}
	for _, c := range []struct {
		kv   []string
		want string
	}{
		{nil, "admin_token: set a secret"},
		{[]string{"BACKEND_ADMIN_TOKEN", "short"}, "admin_token: set a secret of at least 16"},
		{[]string{"BACKEND_ADMIN_TOKENS", "alice-token-0123456789"}, "admin_tokens[0]: write it name:token"},
		{[]string{"BACKEND_ADMIN_TOKENS", "Alice:alice-token-0123456789"}, `name "Alice"`},
		{[]string{"BACKEND_ADMIN_TOKENS", "alice:short"}, "admin_tokens[0] (alice): set a secret of at least 16"},
		{[]string{"BACKEND_ADMIN_TOKENS", "a:alice-token-0123456789,a:other-token-0123456789"}, `the name "a" is taken`},
		{[]string{"BACKEND_ADMIN_TOKEN", "single-admin-token-0123", "BACKEND_ADMIN_TOKENS", "admin:other-token-0123456789"}, `the name "admin" is taken`},
		{[]string{"BACKEND_ADMIN_TOKENS", "a:same-token-0123456789,b:same-token-0123456789"}, "the same token as a"},
		{[]string{"BACKEND_ADMIN_TOKEN", "single-admin-token-0123", "BACKEND_AUDIT_RETENTION", "1h"}, "audit_retention: 1h0m0s is too short"},
	} {
		_, err := load(c.kv...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.kv, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "token-0123456789") {
			t.Errorf("%v: the error repeats a token: %v", c.kv, err)
		}
	}
}
