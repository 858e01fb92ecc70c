package textcheck

import (
	"reflect"
	"slices"
	"testing"
)

func TestControlChars(t *testing.T) {
	for _, c := range []struct {
		body string
		want []string
	}{
		{`{"a":"plain","b":{"c":"ok"},"d":["x","y"]}`, nil},
		{`{"a":"caf\u00e9 \"quoted\" back\\slash"}`, nil},
		{`{"a":"x\u0000y"}`, []string{"a"}},
		{`{"a":"line\nbreak"}`, []string{"a"}},
		{`{"a":"tab\there"}`, []string{"a"}},
		{"{\"a\":\"del\x7f\"}", []string{"a"}},
		{`{"a":"del\u007f"}`, []string{"a"}},
		{"{\"a\":\"c1\u0085\"}", []string{"a"}},
		{`{"a":"c1\u009f"}`, []string{"a"}},
		{`{"a":"not c1\u00a0"}`, nil},
		{"{\"a\":\"rlo\u202e\"}", []string{"a"}},
		{"{\"a\":\"lre\u202a\"}", []string{"a"}},
		{`{"a":"escaped\u2066"}`, []string{"a"}},
		{"{\"a\":\"pdi\u2069\"}", []string{"a"}},
		{"{\"a\":\"not bidi\u2029 \u2065 \u206a \u2029 \u2014\"}", nil},
		{"{\"a\":\"lrm is allowed\u200e\"}", nil},
		{`{"driver":{"first_name":"A\u0000","last_name":"B"},"n":1,"x":"\u0007"}`, []string{"driver.first_name", "x"}},
		{`{"services":["mvr","p\u0000sp"],"after":"\u0001"}`, []string{"after", "services"}},
		{`{"result":{"reviews":[{"text":"\u001b[31m","rating":4.5}]}}`, []string{"result.reviews.text"}},
		{`{"obj":{"inner":{"deep":"ok"},"next":"\u0002"}}`, []string{"obj.next"}},
		{`{"na\u0000me":"v"}`, []string{"body"}},
		{`"\u0000"`, []string{"body"}},
		{`{"a":"\u0000"`, []string{"a"}}, // cut short: still named, decoding reports the rest
	} {
		got := ControlChars([]byte(c.body))
		var names []string
		for k := range got {
			names = append(names, k)
		}
		slices.Sort(names)
		if !reflect.DeepEqual(names, c.want) {
			t.Errorf("%s: %v, want %v", c.body, names, c.want)
		}
	}
}
