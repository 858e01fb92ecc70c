package docs

import (
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
		"curl -s &#39;https://api.example.com/docs&#39;",
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
