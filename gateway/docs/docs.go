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
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"go.yaml.in/yaml/v3"

	"vendorgate/shared/apierr"
	"vendorgate/shared/apikey"
	"vendorgate/shared/sandboxvalues"
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

// codeMeanings says what each error code means to a vendor and what to do.
// TestEveryCodeHasAMeaning keeps it complete.
var codeMeanings = map[apierr.Code]string{
	apierr.ValidationError:      "The request is not valid: error.fields names each field and what is wrong with it. Fix the request; do not retry it unchanged.",
	apierr.InvalidAPIKey:        "X-API-Key is missing, malformed, of another server, unknown or revoked. Check the key; ask for a new one if it was revoked.",
	apierr.APIKeyExpired:        "The key is past its expiry (90 days after it was issued). Ask for a new key.",
	apierr.AccountNotApproved:   "The account is not approved yet. Nothing works until it is.",
	apierr.AccountSuspended:     "The account is suspended: reading works, placing orders is refused.",
	apierr.ServiceNotEnabled:    "The order asks for a service the account does not have; GET /api/vendor/v1/me lists the enabled ones.",
	apierr.PermissionDenied:     "The key may not do this.",
	apierr.NotFound:             "No such path, no such order of yours, or the report cannot be downloaded (yet).",
	apierr.MethodNotAllowed:     "The path exists but not with this method; Allow lists the methods it takes.",
	apierr.IdempotencyConflict:  "This Idempotency-Key was used with another body; error.order_id is the order it placed.",
	apierr.InProgress:           "The first placement with this Idempotency-Key is still running; retry after Retry-After seconds.",
	apierr.PayloadTooLarge:      "The request body is over the size limit.",
	apierr.UnsupportedMediaType: "The body must be application/json.",
	apierr.MVRStateUnavailable:  "MVR checks for the driver's license state are unavailable; order without mvr or try later.",
	apierr.RateLimited:          "Over a rate limit (or too many failed keys from your address): wait Retry-After seconds.",
	apierr.InternalError:        "Our fault. Retry later; quote X-Request-Id if you contact us.",
	apierr.RateLimitUnavailable: "The rate limiter cannot decide right now, so the request is refused rather than let through; retry after Retry-After seconds.",
	apierr.PriceUnavailable:     "The order cannot be priced right now; retry after Retry-After seconds.",
	apierr.RequestFailed:        "The service behind the gateway failed: 502 a bad answer, 503 unavailable (with Retry-After), 504 too slow; 431 also uses it for request headers that are too large. Retry later; polling is safe.",
}

// page is the template's data.
type page struct {
	Title, Version, Summary string
	Intro                   []string
	BaseURL                 string
	Contact                 *openapi3.Contact
	Groups                  []group
	Schemas                 []schemaView
	Codes                   []codeView
	Envelope                string
	Limits                  []limitView
	FailedKeys              string
	Docs                    limitView
	Environments            []envView
	KeyExample              string
	SecretLen               int
	Sandbox                 []sandboxvalues.Value
	MaxBody                 string
}

type group struct {
	Tag, Description string
	Ops              []opView
}

type opView struct {
	ID, Method, Path, Summary string
	Description               []string
	NeedsKey                  bool
	Params                    []paramView
	Body                      *bodyView
	Responses                 []respView
	Curl                      string
}

type paramView struct {
	Name, In, Type, Description string
	Required                    bool
}

type bodyView struct {
	ContentType, Schema, Example string
	// Link: Schema names a component (an anchor on the page).
	Link bool
}

type respView struct {
	Status, Description, ContentType, Schema string
	Link                                     bool
	Headers                                  []string
}

type schemaView struct {
	Name   string
	Fields []fieldView
}

type fieldView struct {
	Name, Type, Description string
	Required                bool
}

type codeView struct {
	Code, Status, Meaning string
}

type limitView struct {
	Policy, Applies, Scope, Header string
	Quota                          int
	Window, Sustained              string
}

type envView struct {
	Name, Prefix, What string
}

func build(doc *openapi3.T, order []string, o Options, base string) (*page, error) {
	p := &page{Title: doc.Info.Title, Version: doc.Info.Version, Summary: doc.Info.Summary, BaseURL: base,
		Contact: doc.Info.Contact, Sandbox: sandboxvalues.Table(), SecretLen: 43, MaxBody: byteSize(o.MaxBodyBytes)}
	p.Intro = paragraphs(doc.Info.Description)
	tagDesc := map[string]string{}
	for _, t := range doc.Tags {
		tagDesc[t.Name] = t.Description
		p.Groups = append(p.Groups, group{Tag: t.Name, Description: t.Description})
	}
	byTag := map[string]int{}
	for i, g := range p.Groups {
		byTag[g.Tag] = i
	}
	for _, path := range order {
		item := doc.Paths.Value(path)
		if item == nil {
			continue
		}
		for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
			op := item.GetOperation(m)
			if op == nil {
				continue
			}
			v := opOf(doc, path, m, op, base)
			tag := "Other"
			if len(op.Tags) > 0 {
				tag = op.Tags[0]
			}
			i, ok := byTag[tag]
			if !ok {
				i = len(p.Groups)
				byTag[tag] = i
				p.Groups = append(p.Groups, group{Tag: tag})
			}
			p.Groups[i].Ops = append(p.Groups[i].Ops, v)
		}
	}
	names := make([]string, 0, len(doc.Components.Schemas))
	for n := range doc.Components.Schemas {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		var fs []fieldView
		fields(doc.Components.Schemas[n].Value, "", &fs, 0)
		p.Schemas = append(p.Schemas, schemaView{Name: n, Fields: fs})
	}
	for _, c := range apierr.Codes() {
		m, ok := codeMeanings[c]
		if !ok {
			return nil, fmt.Errorf("docs: error code %s has no meaning written for it", c)
		}
		status := strconv.Itoa(c.Status())
		if c == apierr.RequestFailed {
			status = "502, 503, 504"
		}
		p.Codes = append(p.Codes, codeView{Code: string(c), Status: status, Meaning: m})
	}
	p.Envelope = `{
  "error": {
    "code": "validation_error",
    "message": "the request is not valid",
    "fields": {"driver.date_of_birth": "must be a date (YYYY-MM-DD)"}
  }
}`
	for _, l := range o.Limits {
		p.Limits = append(p.Limits, limitOf(l))
	}
	p.Docs = limitOf(o.Docs)
	p.FailedKeys = fmt.Sprintf("more than %d failed keys from one client address, or more than %d failed attempts with one key, within %s",
		o.FailedKeysPerAddress, o.FailedKeysPerKey, duration(o.FailedKeysWindow))
	p.Environments = []envView{
		{Name: apikey.Sandbox, Prefix: o.Prefixes.Sandbox, What: "Orders are worked by a simulated provider within seconds; the test values below choose the outcome. Nothing is billed."},
		{Name: apikey.Live, Prefix: o.Prefixes.Live, What: "Real checks, worked by our staff and providers; results can take up to the 48-hour deadline."},
	}
	p.KeyExample = o.Prefixes.Sandbox + "_" + strings.Repeat("x", 43)
	return p, nil
}

func limitOf(l Policy) limitView {
	w := int64((l.Window + time.Second - 1) / time.Second)
	return limitView{Policy: l.Name, Applies: l.Applies, Scope: l.Scope, Quota: l.Quota, Window: duration(l.Window),
		Sustained: fmt.Sprintf("%d per %s", l.Rate, duration(l.Window)),
		Header:    fmt.Sprintf(`"%s";q=%d;w=%d`, l.Name, l.Quota, w)}
}

func opOf(doc *openapi3.T, path, method string, op *openapi3.Operation, base string) opView {
	v := opView{ID: op.OperationID, Method: method, Path: path, Summary: op.Summary, Description: paragraphs(op.Description)}
	v.NeedsKey = op.Security == nil || len(*op.Security) > 0
	if op.Security == nil {
		v.NeedsKey = len(doc.Security) > 0
	}
	for _, pr := range op.Parameters {
		prm := pr.Value
		v.Params = append(v.Params, paramView{Name: prm.Name, In: prm.In, Required: prm.Required,
			Type: typeOf(prm.Schema), Description: prm.Description})
	}
	curl := []string{"curl -s"}
	if v.NeedsKey {
		curl = append(curl, "-H 'X-API-Key: YOUR_API_KEY'")
	}
	for _, pr := range op.Parameters {
		prm := pr.Value
		if prm.In == "header" && prm.Required {
			curl = append(curl, fmt.Sprintf("-H '%s: %v'", prm.Name, exampleOf(prm)))
		}
	}
	if rb := op.RequestBody; rb != nil && rb.Value != nil {
		for ct, mt := range rb.Value.Content {
			bv := &bodyView{ContentType: ct, Schema: refName(mt.Schema), Link: mt.Schema != nil && mt.Schema.Ref != ""}
			if mt.Example != nil {
				if b, err := json.Marshal(mt.Example); err == nil {
					bv.Example = string(b)
				}
			}
			v.Body = bv
			curl = append(curl, "-H 'Content-Type: "+ct+"'")
			if bv.Example != "" {
				curl = append(curl, "-d '"+bv.Example+"'")
			}
		}
	}
	u := base + path
	for _, pr := range op.Parameters {
		prm := pr.Value
		if prm.In == "path" {
			ph := strings.ToUpper(prm.Name)
			if prm.Schema != nil && prm.Schema.Value != nil && len(prm.Schema.Value.Enum) > 0 {
				ph = fmt.Sprint(prm.Schema.Value.Enum[0])
			}
			u = strings.ReplaceAll(u, "{"+prm.Name+"}", ph)
		}
	}
	var q []string
	for _, pr := range op.Parameters {
		if prm := pr.Value; prm.In == "query" && prm.Example != nil {
			q = append(q, prm.Name+"="+fmt.Sprint(prm.Example))
		}
	}
	if len(q) > 0 {
		u += "?" + strings.Join(q, "&")
	}
	curl = append(curl, "'"+u+"'")
	v.Curl = strings.Join(curl, " ")

	codes := make([]string, 0, op.Responses.Len())
	for c := range op.Responses.Map() {
		codes = append(codes, c)
	}
	sort.Strings(codes)
	for _, c := range codes {
		r := op.Responses.Value(c).Value
		rv := respView{Status: c}
		if r.Description != nil {
			rv.Description = *r.Description
		}
		for ct, mt := range r.Content {
			rv.ContentType = ct
			rv.Schema = refName(mt.Schema)
			rv.Link = mt.Schema != nil && mt.Schema.Ref != ""
		}
		for h := range r.Headers {
			rv.Headers = append(rv.Headers, h)
		}
		sort.Strings(rv.Headers)
		v.Responses = append(v.Responses, rv)
	}
	return v
}

func exampleOf(p *openapi3.Parameter) any {
	if p.Example != nil {
		return p.Example
	}
	return strings.ToUpper(strings.ReplaceAll(p.Name, "-", "_"))
}

// refName names a schema: its component name when it is a reference,
// else its type.
func refName(s *openapi3.SchemaRef) string {
	if s == nil {
		return ""
	}
	if s.Ref != "" {
		return s.Ref[strings.LastIndexByte(s.Ref, '/')+1:]
	}
	return typeOf(s)
}

// typeOf describes a schema in a few words: "string (uuid)", "Order or
// null", "array of ServiceName", "one of: a, b".
func typeOf(s *openapi3.SchemaRef) string {
	if s == nil || s.Value == nil {
		return ""
	}
	if s.Ref != "" {
		return s.Ref[strings.LastIndexByte(s.Ref, '/')+1:]
	}
	v := s.Value
	if len(v.OneOf) > 0 {
		var alts []string
		for _, a := range v.OneOf {
			alts = append(alts, typeOf(a))
		}
		return strings.Join(alts, " or ")
	}
	var types []string
	if v.Type != nil {
		types = append(types, v.Type.Slice()...)
	}
	t := strings.Join(types, " or ")
	if v.Type != nil && v.Type.Is("array") && v.Items != nil {
		t = "array of " + typeOf(v.Items)
	}
	if v.Format != "" {
		t += " (" + v.Format + ")"
	}
	if len(v.Enum) > 0 {
		var vals []string
		for _, e := range v.Enum {
			if e != nil {
				vals = append(vals, fmt.Sprint(e))
			}
		}
		t += ", one of: " + strings.Join(vals, ", ")
	}
	if v.Const != nil {
		t += " = " + fmt.Sprint(v.Const)
	}
	return t
}

// fields flattens an object schema's properties: nested inline objects as
// dotted names, references by their component name. Required properties
// come first, in the document's required order.
func fields(s *openapi3.Schema, prefix string, out *[]fieldView, depth int) {
	if s == nil || depth > 3 {
		return
	}
	req := map[string]bool{}
	var names []string
	for _, r := range s.Required {
		req[r] = true
		if _, ok := s.Properties[r]; ok {
			names = append(names, r)
		}
	}
	var rest []string
	for n := range s.Properties {
		if !req[n] {
			rest = append(rest, n)
		}
	}
	sort.Strings(rest)
	for _, n := range append(names, rest...) {
		ps := s.Properties[n]
		f := fieldView{Name: prefix + n, Required: req[n], Type: typeOf(ps)}
		if ps.Value != nil {
			f.Description = ps.Value.Description
		}
		*out = append(*out, f)
		if ps.Ref == "" && ps.Value != nil {
			switch {
			case ps.Value.Type != nil && ps.Value.Type.Is("object") && len(ps.Value.Properties) > 0:
				fields(ps.Value, prefix+n+".", out, depth+1)
			case ps.Value.Type != nil && ps.Value.Type.Is("array") && ps.Value.Items != nil && ps.Value.Items.Ref == "" &&
				ps.Value.Items.Value != nil && len(ps.Value.Items.Value.Properties) > 0:
				fields(ps.Value.Items.Value, prefix+n+"[].", out, depth+1)
			}
		}
	}
}

// inlineCode renders the document's one piece of Markdown, `code`, and
// escapes everything else.
func inlineCode(s string) template.HTML {
	parts := strings.Split(s, "`")
	if len(parts)%2 == 0 { // an unpaired backtick: show it as written
		return template.HTML(template.HTMLEscapeString(s))
	}
	var b strings.Builder
	for i, p := range parts {
		if i%2 == 1 {
			b.WriteString("<code>" + template.HTMLEscapeString(p) + "</code>")
		} else {
			b.WriteString(template.HTMLEscapeString(p))
		}
	}
	return template.HTML(b.String())
}

func paragraphs(s string) []string {
	var out []string
	for _, p := range strings.Split(strings.TrimSpace(s), "\n\n") {
		if p = strings.Join(strings.Fields(p), " "); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// duration reads as people write it: "1 minute", "10 minutes", "30 seconds".
func duration(d time.Duration) string {
	switch {
	case d%time.Hour == 0 && d >= time.Hour:
		return plural(int(d/time.Hour), "hour")
	case d%time.Minute == 0 && d >= time.Minute:
		return plural(int(d/time.Minute), "minute")
	case d%time.Second == 0:
		return plural(int(d/time.Second), "second")
	}
	return d.String()
}

func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return strconv.Itoa(n) + " " + unit + "s"
}

func byteSize(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + " MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + " KiB"
	}
	return strconv.Itoa(n) + " bytes"
}
