package clientip

import (
	"net/netip"
	"testing"
)

func TestFromForwarded(t *testing.T) {
	r := New([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")})
	peer := netip.MustParseAddr("10.0.0.1")
	cases := []struct {
		values []string
		want   string
	}{
		{nil, "10.0.0.1"},
		{[]string{"203.0.113.9"}, "203.0.113.9"},
		{[]string{"6.6.6.6, 203.0.113.9, 10.1.1.1"}, "203.0.113.9"}, // the spoofed leftmost is ignored
		{[]string{"6.6.6.6", "203.0.113.9"}, "203.0.113.9"},
		{[]string{"garbage, 10.2.2.2"}, "10.2.2.2"},
		{[]string{"10.3.3.3, 10.2.2.2"}, "10.3.3.3"},
		{[]string{"::ffff:198.51.100.1"}, "198.51.100.1"},
	}
	for _, c := range cases {
		var vs [][]byte
		for _, v := range c.values {
			vs = append(vs, []byte(v))
		}
		if got := r.fromForwarded(peer, vs).String(); got != c.want {
			t.Errorf("%q: %s, want %s", c.values, got, c.want)
		}
	}
	if New(nil).isTrusted(peer) {
		t.Fatal("no trusted proxies trusts a peer")
	}
}
