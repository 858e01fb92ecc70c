// Package textcheck finds control characters in the strings of a JSON
// body. A control character (Unicode category Cc: U+0000-U+001F, U+007F
// and U+0080-U+009F) has no place in a company name, a driver's name or a
// reason, and PostgreSQL refuses NUL in text and jsonb outright: the same
// order would be stored on SQLite and fail with a 500 on PostgreSQL. So
// the backend refuses them as a validation error before anything else.
//
// The bidirectional embeddings, overrides and isolates (U+202A-U+202E,
// U+2066-U+2069) are refused alike: they are not Cc, but a name holding one
// reorders what follows it wherever it is shown (vendorctl's tables, a
// staff member's terminal, a PDF), so "Lee\u202Eexe.fdp" reads otherwise
// than it is. The marks that only hint a direction (U+200E, U+200F) are
// left alone.
package textcheck

import (
	"bytes"
	"encoding/json"
	"unicode"
)

// Message is what a field holding a control character is told.
const Message = "must not contain control characters (U+0000-U+001F, U+007F-U+009F) or bidirectional overrides (U+202A-U+202E, U+2066-U+2069)"

// HasControl reports whether s holds a character of category Cc or a
// bidirectional override.
func HasControl(s string) bool {
	for _, r := range s {
		if unicode.IsControl(r) || isBidiOverride(r) {
			return true
		}
	}
	return false
}

// isBidiOverride reports whether r is a bidirectional embedding, override
// or isolate (LRE, RLE, PDF, LRO, RLO; LRI, RLI, FSI, PDI).
func isBidiOverride(r rune) bool {
	return r >= 0x202A && r <= 0x202E || r >= 0x2066 && r <= 0x2069
}

// ControlChars names every field of the JSON body whose string value (or
// name) holds a control character, as validation fields: "driver.first_name",
// an array by its field's name ("services"), a top-level value as "body".
// nil when there is none. A body that is not JSON gives nil: decoding it
// reports that.
func ControlChars(body []byte) map[string]string {
	if !mayHoldControl(body) {
		return nil
	}
	type frame struct {
		path    string
		object  bool
		wantKey bool
		key     string
	}
	var stack []*frame
	// child is the field name of a value at the top of stack.
	child := func() string {
		if len(stack) == 0 {
			return ""
		}
		top := stack[len(stack)-1]
		if !top.object {
			return top.path
		}
		if top.path == "" {
			return top.key
		}
		return top.path + "." + top.key
	}
	var out map[string]string
	bad := func(field string) {
		if field == "" {
			field = "body"
		}
		if out == nil {
			out = map[string]string{}
		}
		out[field] = Message
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil {
			return out
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if s, ok := tok.(string); ok && top != nil && top.object && top.wantKey {
			top.key, top.wantKey = s, false
			if HasControl(s) {
				bad(top.path)
			}
			continue
		}
		path := child()
		if top != nil && top.object {
			top.wantKey = true // after this value, the next string is a name
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{', '[':
				stack = append(stack, &frame{path: path, object: v == '{', wantKey: v == '{'})
			default:
				stack = stack[:len(stack)-1]
				if len(stack) > 0 && stack[len(stack)-1].object {
					stack[len(stack)-1].wantKey = true
				}
			}
		case string:
			if HasControl(v) {
				bad(path)
			}
		}
	}
}

// mayHoldControl is a cheap look at the raw body: a control character in
// a JSON string arrives as an escape (\u0000, \n, ...), as DEL itself, or
// as the UTF-8 of a C1 character (0xC2 0x80-0x9F) or of a bidirectional
// override (0xE2 0x80 0xAA-0xAE, 0xE2 0x81 0xA6-0xA9). A body without any
// of them (a base64 PDF, most orders) skips the walk.
func mayHoldControl(body []byte) bool {
	if bytes.IndexByte(body, '\\') >= 0 || bytes.IndexByte(body, 0x7f) >= 0 {
		return true
	}
	return hasSequence(body, 0xC2, func(rest []byte) bool { return rest[0] >= 0x80 && rest[0] <= 0x9F }) ||
		hasSequence(body, 0xE2, func(rest []byte) bool {
			return len(rest) >= 2 && (rest[0] == 0x80 && rest[1] >= 0xAA && rest[1] <= 0xAE ||
				rest[0] == 0x81 && rest[1] >= 0xA6 && rest[1] <= 0xA9)
		})
}

// hasSequence reports whether some lead byte in body is followed by bytes
// (at least one) that match.
func hasSequence(body []byte, lead byte, match func(rest []byte) bool) bool {
	for i := bytes.IndexByte(body, lead); i >= 0 && i+1 < len(body); {
		if match(body[i+1:]) {
			return true
		}
		j := bytes.IndexByte(body[i+1:], lead)
		if j < 0 {
			return false
		}
		i += 1 + j
	}
	return false
}
