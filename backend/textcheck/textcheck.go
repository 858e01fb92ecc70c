// Package textcheck finds control characters in the strings of a JSON
// body. A control character (Unicode category Cc: U+0000-U+001F, U+007F
// and U+0080-U+009F) has no place in a company name, a driver's name or a
// reason, and PostgreSQL refuses NUL in text and jsonb outright: the same
// order would be stored on SQLite and fail with a 500 on PostgreSQL. So
// the backend refuses them as a validation error before anything else.
package textcheck

import (
	"bytes"
	"encoding/json"
	"unicode"
)

// Message is what a field holding a control character is told.
const Message = "must not contain control characters (U+0000-U+001F, U+007F-U+009F)"

// HasControl reports whether s holds a character of category Cc.
func HasControl(s string) bool {
	for _, r := range s {
		if unicode.IsControl(r) {
			return true
		}
	}
	return false
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
// as the UTF-8 of a C1 character (0xC2 0x80-0x9F). A body without any of
// them (a base64 PDF, most orders) skips the walk.
func mayHoldControl(body []byte) bool {
	if bytes.IndexByte(body, '\\') >= 0 || bytes.IndexByte(body, 0x7f) >= 0 {
		return true
	}
	for i := bytes.IndexByte(body, 0xC2); i >= 0 && i+1 < len(body); {
		if c := body[i+1]; c >= 0x80 && c <= 0x9F {
			return true
		}
		j := bytes.IndexByte(body[i+1:], 0xC2)
		if j < 0 {
			return false
		}
		i += 1 + j
	}
	return false
}
