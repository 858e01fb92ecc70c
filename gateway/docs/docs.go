// Package docs renders what the gateway serves to vendors on its public
// listener without a key: /docs, one HTML page generated from the OpenAPI
// document the end-to-end tests validate answers against, and the document
// itself as /openapi.yaml and /openapi.json with this gateway's public
// address as its server. Render runs at start and on every reload (the page
// shows the limits in force), never per request: answers come from memory.
package docs

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"go.yaml.in/yaml/v3"

	"vendorgate/shared/apikey"
)

//go:embed page.html.tmpl
var pageTemplate string

// Policy is one rate limit as vendors are told of it.
type Policy struct {
	// Name is the policy's name in RateLimit-Policy ("reads").
	Name string
	// Applies says which requests count ("GET routes under /api/vendor/").
	Applies string
	// Scope says whose budget it is ("per vendor, across all its keys").
	Scope string
	// Quota is the most requests at once (the burst, q in the header).
	Quota int
	// Rate requests per Window is the sustained rate.
	Rate   int
	Window time.Duration
	// Algorithm is how the limit decides: "gcra" (a token bucket; the
	// default when empty), "quota" (Rate in each calendar window) or
	// "window" (a sliding window: Rate in any Window).
	Algorithm string
	// Calendar names a quota's window: "UTC day", "UTC month",
	// "7 days (UTC, counted from 1970-01-01)".
	Calendar string
	// InFlight: a policy of kind concurrency, Rate requests in flight at
	// once (no Window, not in the RateLimit headers).
	InFlight bool
	// Cost is the tokens one request takes (0 or 1: one); Quota and Rate
	// then count tokens.
	Cost int
}

// Options is what a rendering needs. Every field is required except the
// policies, which may be empty.
type Options struct {
	// Document is the OpenAPI document in YAML.
	Document []byte
	// PublicBaseURL is the gateway's public address (scheme, host, port;
	// no path): the curl lines and the document's servers entry.
	PublicBaseURL string
	// Prefixes are the key prefixes this gateway accepts.
	Prefixes apikey.Prefixes
	// Limits are the vendor limits in force, in the order shown.
	Limits []Policy
	// FailedKeys describe the failed-key throttle: PerAddress and PerKey
	// failures within Window.
	FailedKeysPerAddress, FailedKeysPerKey int
	FailedKeysWindow                       time.Duration
	// Docs is the documentation routes' own per-address limit.
	Docs Policy
	// MaxBodyBytes is the request body limit.
	MaxBodyBytes int
}

// Asset is one rendered answer with its validator.
type Asset struct {
	Body        []byte
	ContentType string
	// ETag is a strong validator of Body, quoted as the header carries it.
	ETag string
}

// Set is everything the documentation routes serve.
type Set struct {
	HTML, YAML, JSON Asset
}

// Render builds the page and the two forms of the document.
func Render(o Options) (*Set, error) {
	base := strings.TrimRight(o.PublicBaseURL, "/")
	if base == "" {
		return nil, errors.New("docs: public base URL is empty")
	}
	yml, err := withServer(o.Document, base)
	if err != nil {
		return nil, fmt.Errorf("docs: set servers: %w", err)
	}
	var tree any
	if err := yaml.Unmarshal(yml, &tree); err != nil {
		return nil, fmt.Errorf("docs: read document: %w", err)
	}
	js, err := json.MarshalIndent(tree, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("docs: document to JSON: %w", err)
	}
	doc, err := openapi3.NewLoader().LoadFromData(yml)
	if err != nil {
		return nil, fmt.Errorf("docs: load document: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("docs: invalid document: %w", err)
	}
	order, err := pathOrder(yml)
	if err != nil {
		return nil, err
	}
	p, err := build(doc, order, o, base)
	if err != nil {
		return nil, err
	}
	t, err := template.New("page").Funcs(template.FuncMap{"lower": strings.ToLower, "md": inlineCode}).Parse(pageTemplate)
	if err != nil {
		return nil, fmt.Errorf("docs: template: %w", err)
	}
	var html bytes.Buffer
	if err := t.Execute(&html, p); err != nil {
		return nil, fmt.Errorf("docs: render: %w", err)
	}
	return &Set{
		HTML: asset(html.Bytes(), "text/html; charset=utf-8"),
		YAML: asset(yml, "application/yaml; charset=utf-8"),
		JSON: asset(append(js, '\n'), "application/json"),
	}, nil
}

func asset(b []byte, contentType string) Asset {
	sum := sha256.Sum256(b)
	return Asset{Body: b, ContentType: contentType, ETag: `"` + base64.RawURLEncoding.EncodeToString(sum[:18]) + `"`}
}

// withServer replaces the document's servers with base, keeping the rest
// of the YAML (order, anchors, comments) as written.
func withServer(doc []byte, base string) ([]byte, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil {
		return nil, err
	}
	if len(root.Content) != 1 || root.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("document is not a mapping")
	}
	m := root.Content[0]
	servers := &yaml.Node{Kind: yaml.SequenceNode, Content: []*yaml.Node{{Kind: yaml.MappingNode, Content: []*yaml.Node{
		{Kind: yaml.ScalarNode, Value: "url"}, {Kind: yaml.ScalarNode, Value: base},
		{Kind: yaml.ScalarNode, Value: "description"}, {Kind: yaml.ScalarNode, Value: "This gateway."},
	}}}}
	found := false
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == "servers" {
			m.Content[i+1] = servers
			found = true
		}
	}
	if !found {
		return nil, errors.New("document has no servers entry")
	}
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&root); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// pathOrder is the order of the document's paths as written (the loader
// keeps them in a map).
func pathOrder(doc []byte) ([]string, error) {
	var d struct {
		Paths yaml.Node `yaml:"paths"`
	}
	if err := yaml.Unmarshal(doc, &d); err != nil {
		return nil, fmt.Errorf("docs: read paths: %w", err)
	}
	var out []string
	for i := 0; i+1 < len(d.Paths.Content); i += 2 {
		out = append(out, d.Paths.Content[i].Value)
	}
	return out, nil
}
