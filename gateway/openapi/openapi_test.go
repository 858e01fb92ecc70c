package openapi

import (
	"context"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"vendorgate/shared/apierr"
)

func TestDocumentIsValid(t *testing.T) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(Document)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("validate: %v", err)
	}
	for _, p := range []string{"/api/vendor/v1/me", "/api/vendor/v1/orders", "/api/vendor/v1/orders/{order_id}",
		"/api/vendor/v1/orders/{order_id}/reports/{service}"} {
		if doc.Paths.Find(p) == nil {
			t.Errorf("path %s missing", p)
		}
	}
	codes := doc.Components.Schemas["ErrorEnvelope"].Value.Properties["error"].Value.Properties["code"].Value.Enum
	have := map[string]bool{}
	for _, c := range codes {
		have[c.(string)] = true
	}
	for _, c := range apierr.Codes() {
		if !have[string(c)] {
			t.Errorf("error code %s missing from the document", c)
		}
	}
	if len(codes) != len(apierr.Codes()) {
		t.Errorf("document lists %d codes, the code %d", len(codes), len(apierr.Codes()))
	}
}
