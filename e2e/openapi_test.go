package e2e

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"vendorgate/gateway/openapi"
)

// conformance validates real answers of the running stack against the
// OpenAPI document the gateway embeds, so the document cannot drift.
type conformance struct {
	router routers.Router
}

func newConformance(t *testing.T, gatewayURL string) *conformance {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(openapi.Document)
	if err != nil {
		t.Fatal(err)
	}
	doc.Servers = openapi3.Servers{{URL: gatewayURL}}
	r, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	openapi3filter.RegisterBodyDecoder("application/pdf", openapi3filter.FileBodyDecoder)
	openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.FileBodyDecoder)
	return &conformance{router: r}
}

// check validates one exchange; an answer on a path the document does not
// have (an unknown path's 404) is checked to be the envelope only.
func (c *conformance) check(t *testing.T, method, rawURL string, reqHeader http.Header, r response) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	req := &http.Request{Method: method, URL: u, Header: reqHeader, Host: u.Host}
	route, params, err := c.router.FindRoute(req)
	if err != nil {
		if r.errorCode() == "" {
			t.Errorf("%s %s: %d is neither a documented route nor an envelope: %s", method, rawURL, r.status, r.body)
		}
		return
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request: req, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
		},
		Status: r.status,
		Header: r.header,
		Body:   io.NopCloser(bytes.NewReader(r.body)),
		Options: &openapi3filter.Options{
			IncludeResponseStatus: true,
			MultiError:            true,
		},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		t.Errorf("%s %s answered %d, which the OpenAPI document does not allow: %v\nbody: %.400s", method, rawURL, r.status, err, r.body)
	}
	// The document names the codes each response of each route carries
	// (its description): an answered code it does not name is drift.
	if code := r.errorCode(); code != "" {
		if resp := route.Operation.Responses.Status(r.status); resp != nil && resp.Value != nil && resp.Value.Description != nil &&
			!regexp.MustCompile(`\b`+regexp.QuoteMeta(code)+`\b`).MatchString(*resp.Value.Description) {
			t.Errorf("%s %s answered %d %s, which the document's %d of this route does not name (%q)", method, rawURL, r.status, code, r.status, *resp.Value.Description)
		}
	}
}
