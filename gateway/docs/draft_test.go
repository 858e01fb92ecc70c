package docs

import (
	"html"
	"os"
	"strings"
	"testing"
	"time"

	"vendorgate/gateway/openapi"
	"vendorgate/gateway/policy"
	"vendorgate/shared/apikey"
)

// TestExamplesUseTheHeaderFormatter: the page's RateLimit-Policy and
// RateLimit examples, for a limit of each kind, are written by the
// formatter the headers use (policy.AppendPolicy, AppendState), byte for
// byte; the page cites the draft revision they follow (policy.Draft) and
// explains its keys. Neither the page's code nor its template writes a
// key of its own: moving to the next revision is policy's one change.
func TestExamplesUseTheHeaderFormatter(t *testing.T) {
	for _, tc := range []struct {
		limit             Policy
		policyLine, state string
	}{
		{Policy{Name: "reads", Applies: "reads", Scope: "per vendor", Quota: 120, Rate: 120, Window: time.Minute},
			string(policy.AppendPolicy(nil, "reads", 120, time.Minute)), string(policy.AppendState(nil, "reads", 90, 15*time.Second))},
		{Policy{Name: "daily", Applies: "orders", Scope: "per vendor", Quota: 1000, Rate: 1000, Window: 24 * time.Hour, Algorithm: "quota", Calendar: "UTC day"},
			string(policy.AppendPolicy(nil, "daily", 1000, 24*time.Hour)), string(policy.AppendState(nil, "daily", 750, 24*time.Hour))},
		{Policy{Name: "sliding", Applies: "reads", Scope: "per vendor", Quota: 60, Rate: 60, Window: time.Minute, Algorithm: "window"},
			string(policy.AppendPolicy(nil, "sliding", 60, time.Minute)), string(policy.AppendState(nil, "sliding", 45, time.Minute))},
		{Policy{Name: "reports", Applies: "reports", Scope: "per vendor", Quota: 40, Rate: 20, Cost: 5, Window: time.Minute},
			string(policy.AppendPolicy(nil, "reports", 40, time.Minute)), string(policy.AppendState(nil, "reports", 30, 30*time.Second))},
	} {
		s, err := Render(Options{Document: openapi.Document, PublicBaseURL: "https://api.example.com", Prefixes: apikey.DefaultPrefixes(),
			Limits: []Policy{tc.limit}, FailedKeysPerAddress: 100, FailedKeysPerKey: 10, FailedKeysWindow: 10 * time.Minute,
			Docs: Policy{Name: "docs", Quota: 60, Rate: 60, Window: time.Minute}, MaxBodyBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		page := html.UnescapeString(string(s.HTML.Body))
		if !strings.Contains(page, "RateLimit-Policy: "+tc.policyLine+"\n") || !strings.Contains(page, "RateLimit: "+tc.state+"<") {
			i := strings.Index(page, "RateLimit-Policy: ")
			t.Errorf("%s: the examples are not the formatter's %q and %q:\n%s", tc.limit.Name, tc.policyLine, tc.state, page[i:i+120])
		}
		if !strings.Contains(page, policy.Draft) {
			t.Errorf("%s: the page does not cite %s", tc.limit.Name, policy.Draft)
		}
		for _, key := range []string{policy.DraftQuota, policy.DraftWindow, policy.DraftRemaining, policy.DraftReset} {
			if !strings.Contains(page, "<code>"+key+"</code>") {
				t.Errorf("%s: the page does not explain the key %s", tc.limit.Name, key)
			}
		}
	}
	for _, f := range []string{"page.go", "page.html.tmpl"} {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, own := range []string{";q=", ";w=", ";r=", ";t=", "<code>q</code>", "<code>w</code>", "<code>r</code>", "<code>t</code>", "q={{", "w={{"} {
			if strings.Contains(string(src), own) {
				t.Errorf("%s writes the key %q itself, not from policy's draft keys", f, own)
			}
		}
	}
}
