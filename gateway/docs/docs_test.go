package docs

import (
	"html"
	"strings"
	"testing"
	"time"

	"vendorgate/gateway/openapi"
	"vendorgate/shared/apierr"
	"vendorgate/shared/apikey"
)

func render(t *testing.T) *Set {
	t.Helper()
	s, err := Render(Options{Document: openapi.Document, PublicBaseURL: "https://api.example.com/", Prefixes: apikey.DefaultPrefixes(),
		Limits:               []Policy{{Name: "reads", Applies: "reads", Scope: "per vendor", Quota: 120, Rate: 120, Window: time.Minute}},
		FailedKeysPerAddress: 100, FailedKeysPerKey: 10, FailedKeysWindow: 10 * time.Minute,
		Docs: Policy{Name: "docs", Quota: 60, Rate: 60, Window: time.Minute}, MaxBodyBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestEveryCodeHasAMeaning(t *testing.T) {
	for _, c := range apierr.Codes() {
		if codeMeanings[c] == "" {
			t.Errorf("error code %s has no meaning for the docs page", c)
		}
	}
	if len(codeMeanings) != len(apierr.Codes()) {
		t.Errorf("%d meanings for %d codes", len(codeMeanings), len(apierr.Codes()))
	}
}

// TestPage: every operation of the document is on the page with a curl
// line on the public address (the trailing slash trimmed), the document's
// Markdown code spans are rendered, and nothing is loaded from elsewhere.
func TestPage(t *testing.T) {
	s := render(t)
	page := string(s.HTML.Body)
	for _, id := range []string{"getMe", "listOrders", "placeOrder", "getOrder", "getReport", "getDocs", "getOpenAPIYAML", "getOpenAPIJSON"} {
		if !strings.Contains(page, `id="`+id+`"`) {
			t.Errorf("page lacks operation %s", id)
		}
	}
	for _, want := range []string{
		"&#39;https://api.example.com/api/vendor/v1/orders/ORDER_ID/reports/mvr&#39;",
		"&#39;https://api.example.com/api/vendor/v1/orders?limit=50&#39;",
		"-H &#39;Idempotency-Key: order-2026-0001&#39;",
		"curl -s \\\n  &#39;https://api.example.com/docs&#39;",
		"<code>X-API-Key</code>",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	if strings.Contains(page, "`") {
		t.Error("a Markdown backtick reached the page")
	}
	for _, bad := range []string{"<script", "<link", "@import", "url(", "src="} {
		if strings.Contains(page, bad) {
			t.Errorf("page has %s: it must work offline, alone", bad)
		}
	}
	if !strings.Contains(string(s.YAML.Body), "url: https://api.example.com\n") || !strings.Contains(string(s.JSON.Body), `"url": "https://api.example.com"`) {
		t.Error("servers entry is not the public address")
	}
	if s.HTML.ETag == s.YAML.ETag || !strings.HasPrefix(s.HTML.ETag, `"`) {
		t.Errorf("ETags %s %s", s.HTML.ETag, s.YAML.ETag)
	}
}

func TestRenderRefusesNoBaseURL(t *testing.T) {
	if _, err := Render(Options{Document: openapi.Document}); err == nil {
		t.Fatal("rendered without a public address")
	}
}

// TestPageFollowsTheLimitsInForce: after a reload set reads to 30 a
// minute, Getting started says 30 (not the default 120), the example
// RateLimit header is derived from q=30 (r at most q), and what the limit
// admits is worked through from its numbers.
func TestPageFollowsTheLimitsInForce(t *testing.T) {
	for _, tc := range []struct {
		rate                   int
		plain, example, admits string
	}{
		{120, "<code>reads</code> 120 a minute", `&#34;reads&#34;;r=90;t=15`, "120 at once, then one every 0.5 s, so up to 240 in the first minute"},
		{30, "<code>reads</code> 30 a minute", `&#34;reads&#34;;r=23;t=14`, "30 at once, then one every 2 s, so up to 60 in the first minute"},
	} {
		s, err := Render(Options{Document: openapi.Document, PublicBaseURL: "https://api.example.com", Prefixes: apikey.DefaultPrefixes(),
			Limits: []Policy{{Name: "reads", Applies: "reads", Scope: "per vendor", Quota: tc.rate, Rate: tc.rate, Window: time.Minute},
				{Name: "orders", Applies: "orders", Scope: "per vendor", Quota: 10, Rate: 10, Window: time.Minute}},
			FailedKeysPerAddress: 100, FailedKeysPerKey: 10, FailedKeysWindow: 10 * time.Minute,
			Docs: Policy{Name: "docs", Quota: 60, Rate: 60, Window: time.Minute}, MaxBodyBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		page := string(s.HTML.Body)
		start := page[strings.Index(page, `id="start"`):strings.Index(page, `id="keys"`)]
		if !strings.Contains(start, tc.plain) || !strings.Contains(start, "<code>orders</code> 10 a minute") {
			t.Errorf("rate %d: Getting started does not say %q:\n%s", tc.rate, tc.plain, start)
		}
		if tc.rate != 120 && strings.Contains(page, "120") {
			t.Errorf("rate %d: the page still says 120 somewhere", tc.rate)
		}
		if !strings.Contains(page, "RateLimit: "+tc.example) || strings.Contains(page, "r=37") {
			t.Errorf("rate %d: the example RateLimit is not %s", tc.rate, tc.example)
		}
		if !strings.Contains(page, tc.admits) {
			t.Errorf("rate %d: the page does not say what the limit admits (%q)", tc.rate, tc.admits)
		}
	}
}

// TestCurlLinesFitAPhone: every curl command is one argument a line with a
// backslash continuation, no line wider than a phone shows (about 72
// characters at the page's code size) except the URL a line of its own.
func TestCurlLinesFitAPhone(t *testing.T) {
	page := string(render(t).HTML.Body)
	n := 0
	for _, block := range strings.Split(page, "<pre><code>curl ")[1:] {
		cmd := html.UnescapeString("curl " + block[:strings.Index(block, "</code></pre>")])
		n++
		lines := strings.Split(cmd, "\n")
		if len(lines) < 2 {
			t.Errorf("a curl command on one line: %s", cmd)
		}
		inBody := false
		for i, l := range lines {
			if strings.HasPrefix(strings.TrimSpace(l), "-d '") {
				inBody = true
			}
			last := i == len(lines)-1
			if !inBody && !last && !strings.HasSuffix(l, " \\") {
				t.Errorf("line %q of a curl command does not continue with a backslash:\n%s", l, cmd)
			}
			if strings.HasSuffix(l, "' \\") {
				inBody = false
			}
			if len(l) > 72 && !strings.HasPrefix(strings.TrimSpace(l), "'https://") {
				t.Errorf("a curl line of %d characters: %q", len(l), l)
			}
		}
	}
	if n < 8 {
		t.Fatalf("found %d curl commands on the page", n)
	}
}

// A policy costing several tokens a request is worked through in requests,
// beside its quota in tokens.
func TestPageSaysACost(t *testing.T) {
	s, err := Render(Options{Document: openapi.Document, PublicBaseURL: "https://api.example.com", Prefixes: apikey.DefaultPrefixes(),
		Limits: []Policy{{Name: "reads", Applies: "reads", Scope: "per vendor", Quota: 120, Rate: 120, Window: time.Minute},
			{Name: "report-downloads", Applies: "report downloads", Scope: "per vendor", Quota: 100, Rate: 100, Window: time.Minute, Cost: 5}},
		FailedKeysPerAddress: 100, FailedKeysPerKey: 10, FailedKeysWindow: 10 * time.Minute,
		Docs: Policy{Name: "docs", Quota: 60, Rate: 60, Window: time.Minute}, MaxBodyBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	page := string(s.HTML.Body)
	for _, want := range []string{
		"100 a minute tokens, 5 a request",
		"20 requests at once (100 tokens), then one every 3 s, so up to 40 in the first minute",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page does not say %q", want)
		}
	}
}
