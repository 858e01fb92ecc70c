package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// Diff names each changed setting with its old and new values as -check
// prints them; no secret's value appears in any change.
func TestDiff(t *testing.T) {
	old := DefaultGateway()
	old.InternalToken = "old-internal-token-123456789"
	old.KeySigningSecrets = List{"old-signing-secret-0123456789abcdef"}
	old.Redis.URL = List{"redis://gw:old-pw-1@10.0.0.1:6379/0"}
	old.Limits.Policies = []Policy{{Name: "downloads", Scope: ScopeVendor, Class: "reports", Limit: Limit{Rate: 5, Period: time.Minute}}}
	same := *old
	if cs, err := Diff(old, &same); err != nil || len(cs) != 0 {
		t.Fatalf("a copy differs: %v %v", cs, err)
	}
	c := *old
	c.InternalToken = "new-internal-token-123456789"
	c.KeySigningSecrets = List{"new-signing-secret-0123456789abcdef", "old-signing-secret-0123456789abcdef"}
	c.Redis.URL = List{"redis://gw:new-pw-2@10.0.0.2:6379/0"}
	c.Limits.Policies = []Policy{{Name: "downloads", Scope: ScopeVendor, Class: "reports", Limit: Limit{Rate: 7, Period: time.Minute}}}
	c.Proxy.StreamIdleTimeout = 45 * time.Second
	cs, err := Diff(old, &c)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ch := range cs {
		got = append(got, ch.String())
	}
	want := []string{
		"internal_token: changed (secret)",
		"key_signing_secrets: [********] -> [********, ********]",
		"limits.policies[0].rate: 5 -> 7",
		"proxy.stream_idle_timeout: 30s -> 45s",
		"redis.url: [redis://gw:xxxxx@10.0.0.1:6379/0] -> [redis://gw:xxxxx@10.0.0.2:6379/0]",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("changes:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, line := range got {
		for _, secret := range []string{"old-pw-1", "new-pw-2", "internal-token", "signing-secret"} {
			if strings.Contains(line, secret) {
				t.Errorf("%q shows a secret", line)
			}
		}
	}
	if _, err := Diff(old, DefaultBackend()); err == nil {
		t.Error("a gateway's and a backend's configurations compared")
	}
}
