package docs

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

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
				if b, err := json.MarshalIndent(mt.Example, "", "  "); err == nil {
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
	v.Curl = curlLines(curl)

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

// curlLines writes a command one argument a line, each continued with a
// backslash, so that a narrow screen never breaks it inside a token and a
// copy still runs in a shell. A body's lines are indented under its -d.
func curlLines(args []string) string {
	for i := 1; i < len(args); i++ {
		args[i] = "  " + strings.ReplaceAll(args[i], "\n", "\n  ")
	}
	return strings.Join(args, " \\\n")
}
