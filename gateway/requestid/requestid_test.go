package requestid

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"vendorgate/shared/wire"
)

func TestSane(t *testing.T) {
	for _, c := range []struct {
		id   string
		sane bool
	}{
		{"", false},
		{strings.Repeat("a", 64), true},
		{strings.Repeat("a", 65), false},
		{"abc-DEF_0.9:x", true},
		{"a b", false},
		{"a/b", false},
		{"3f2504e0-4f89-11d3-9a0c-0305e82c3301", true},
		{"abcdefgh_" + strings.Repeat("Q", 32), false},           // shaped like a key
		{"id:abcdefgh_" + strings.Repeat("Q", 32) + ".1", false}, // a key inside it
		{"abcdefgh_" + strings.Repeat("Q", 31), true},            // a secret too short
	} {
		if got := Sane([]byte(c.id)); got != c.sane {
			t.Errorf("Sane(%q) = %v, want %v", c.id, got, c.sane)
		}
	}
}

// TestSet: a sane client id is kept; otherwise the source makes one, its
// prefix and a number one higher each time, as Append does.
func TestSet(t *testing.T) {
	var s Source
	s.Seed()
	made := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]+$`)
	var h fasthttp.RequestHeader
	var rid [64]byte
	h.Set(wire.HeaderRequestID, "client-id-1")
	if n := s.Set(&rid, &h); string(rid[:n]) != "client-id-1" {
		t.Fatalf("a sane id became %q", rid[:n])
	}
	h.Set(wire.HeaderRequestID, "not sane")
	n := s.Set(&rid, &h)
	first := string(rid[:n])
	if !made.MatchString(first) || !strings.HasSuffix(first, "-1") {
		t.Fatalf("made id %q, want the prefix and 1", first)
	}
	second := string(s.Append(nil))
	if second[:9] != first[:9] || !strings.HasSuffix(second, "-2") {
		t.Fatalf("appended id %q after %q, want the same prefix and 2", second, first)
	}
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.Set(wire.HeaderRequestID, "client-id-2")
	of := s.Of(&ctx)
	if !bytes.Equal(of, []byte("client-id-2")) {
		t.Fatalf("Of = %q", of)
	}
	var other Source
	other.Seed()
	if string(other.Append(nil)[:9]) == first[:9] {
		t.Log("two seeds gave the same prefix (1 in 2^32)")
	}
}
