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
		"limits.policies[downloads]: {name: downloads, scope: vendor, class: reports, kind: gcra, rate: 5, period: 1m0s, burst: 5, cost: 1} -> " +
			"{name: downloads, scope: vendor, class: reports, kind: gcra, rate: 7, period: 1m0s, burst: 7, cost: 1}",
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

// A reload that adds three policy rows lists three changes, one a row,
// each with its effective values and none of the fields its kind does not
// have; nothing reads as a secret. A row added before the others, or one
// override changed, changes one row.
func TestDiffRows(t *testing.T) {
	old := DefaultGateway()
	c := *old
	c.Limits.Policies = []Policy{
		{Name: "burst", Scope: ScopeVendor, Class: "reports", Limit: Limit{Rate: 5, Period: time.Minute}},
		{Name: "daily", Scope: ScopeVendor, Class: ClassOrders, Limit: Limit{Kind: KindQuota, Rate: 1000, Window: WindowDay},
			Overrides: map[string]Limit{"v1": {Rate: 5}}},
		{Name: "inflight", Scope: ScopeVendor, Class: "reports", Limit: Limit{Kind: KindConcurrency, Rate: 4}},
	}
	got := diffLines(t, old, &c)
	want := []string{
		"limits.policies[burst]: added {name: burst, scope: vendor, class: reports, kind: gcra, rate: 5, period: 1m0s, burst: 5, cost: 1}",
		"limits.policies[daily]: added {name: daily, scope: vendor, class: orders, kind: quota, rate: 1000, window: day, overrides: {v1: {rate: 5}}}",
		"limits.policies[inflight]: added {name: inflight, scope: vendor, class: reports, kind: concurrency, rate: 4}",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("three rows added:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := diffLines(t, &c, old); len(got) != 3 || !strings.HasPrefix(got[0], "limits.policies[burst]: removed {") {
		t.Errorf("three rows removed:\n%s", strings.Join(got, "\n"))
	}

	d := c
	d.Limits.Policies = append([]Policy{{Name: "first", Scope: ScopeKey, Class: ClassReads, Limit: Limit{Rate: 2, Period: time.Second, Burst: 4}}}, c.Limits.Policies...)
	d.Limits.Policies[2].Overrides = map[string]Limit{"v1": {Rate: 6}}
	got = diffLines(t, &c, &d)
	want = []string{
		"limits.policies[daily]: {name: daily, scope: vendor, class: orders, kind: quota, rate: 1000, window: day, overrides: {v1: {rate: 5}}} -> " +
			"{name: daily, scope: vendor, class: orders, kind: quota, rate: 1000, window: day, overrides: {v1: {rate: 6}}}",
		"limits.policies[first]: added {name: first, scope: key, class: reads, kind: gcra, rate: 2, period: 1s, burst: 4, cost: 1}",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("a row added first and an override changed:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func diffLines(t *testing.T, old, new *Gateway) []string {
	t.Helper()
	cs, err := Diff(old, new)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range cs {
		out = append(out, c.String())
		if c.Secret {
			t.Errorf("%s: no secret changed", c)
		}
	}
	return out
}

// Print (-check) shows each limit's effective values: a quota row without
// burst, cost or period, a GCRA row's burst and cost as they apply, an
// override without a kind of its own. What it prints loads back to the
// same limits.
func TestPrintEffectiveLimits(t *testing.T) {
	env := envMap(map[string]string{"GATEWAY_INTERNAL_TOKEN": "print-test-internal-token-0123", "GATEWAY_KEY_SIGNING_SECRETS": testSigning})
	file := writeFile(t, `limits:
  overrides:
    v2: {orders: {rate: 3, period: 1m}}
  policies:
    - {name: daily, scope: vendor, class: orders, kind: quota, rate: 1000, window: day, overrides: {v1: {rate: 5}}}
    - {name: keyed, scope: key, class: reads, rate: 10, period: 1m, shadow_twin: {rate: 5, period: 1m}}
`)
	g, err := LoadGateway(file, env)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := Print(&b, g); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	daily := out[strings.Index(out, "- name: daily"):strings.Index(out, "- name: keyed")]
	for _, absent := range []string{"burst:", "cost:", "period:", "kind: \"\"", "days:", "shadow_twin:"} {
		if strings.Contains(daily, absent) {
			t.Errorf("the quota row shows %q:\n%s", absent, daily)
		}
	}
	keyed := out[strings.Index(out, "- name: keyed"):]
	for _, want := range []string{"kind: gcra", "burst: 10", "cost: 1", "shadow_twin:", "burst: 5"} {
		if !strings.Contains(keyed, want) {
			t.Errorf("the GCRA row does not show %q:\n%s", want, keyed)
		}
	}
	if strings.Contains(out, "window: \"\"") || strings.Contains(out, "kind: \"\"") {
		t.Errorf("-check prints empty fields:\n%s", out)
	}
	again, err := LoadGateway(writeFile(t, out[strings.Index(out, "limits:"):]), env)
	if err != nil {
		t.Fatalf("the printed limits do not load: %v\n%s", err, out)
	}
	if cs := diffLines(t, g, again); len(cs) != 0 {
		t.Errorf("the printed limits load as other limits: %q", cs)
	}
}

// A quota row's lease: shown by the diff and by -check (an override under
// its row's); refused on another kind and in an override.
func TestQuotaLease(t *testing.T) {
	old := DefaultGateway()
	c := *old
	c.Limits.Policies = []Policy{{Name: "daily", Scope: ScopeVendor, Class: ClassOrders, Limit: Limit{Kind: KindQuota, Rate: 1000, Window: WindowDay, Lease: true},
		Overrides: map[string]Limit{"v1": {Rate: 5}}}}
	want := []string{"limits.policies[daily]: added {name: daily, scope: vendor, class: orders, kind: quota, rate: 1000, window: day, lease: true, overrides: {v1: {rate: 5}}}"}
	if got := diffLines(t, old, &c); !reflect.DeepEqual(got, want) {
		t.Errorf("a leased quota added:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if l := c.Limits.Policies[0].For("v1"); !l.Lease || l.Rate != 5 {
		t.Errorf("v1's override %+v: want its row's lease", l)
	}
	env := envMap(map[string]string{"GATEWAY_INTERNAL_TOKEN": strings.Repeat("t", 16), "GATEWAY_KEY_SIGNING_SECRETS": testSigning})
	for _, tc := range []struct{ row, want string }{
		{"{name: daily, scope: vendor, class: orders, kind: quota, rate: 1000, window: day, lease: true}", ""},
		{"{name: pace, scope: vendor, class: orders, rate: 10, period: 1m, lease: true}", "limits.policies[0].lease: only a quota is leased this way (a gcra row is leased by redis.lease_max, or never)"},
		{"{name: slide, scope: vendor, class: orders, kind: window, rate: 10, period: 1m, lease: true}", "limits.policies[0].lease: only a quota is leased this way (a window row"},
		{"{name: once, scope: vendor, class: orders, kind: concurrency, rate: 2, lease: true}", "limits.policies[0].lease: only a quota is leased this way (a policy of kind concurrency never is)"},
		{"{name: daily, scope: vendor, class: orders, kind: quota, rate: 1000, window: day, overrides: {v1: {rate: 5, lease: true}}}", "limits.policies[0].overrides.v1.lease: an override keeps the row's lease"},
	} {
		_, err := LoadGateway(writeFile(t, "limits:\n  policies:\n    - "+tc.row+"\n"), env)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.row, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want %q", tc.row, err, tc.want)
		}
	}
}
