package main

import (
	"strings"
	"testing"

	"vendorgate/cmd/vendorctl/internal/view"
)

// TestKeyListExpiringAgainstBackend: `key list --expiring 14d` lists every
// vendor's working keys that expire within 14 days, soonest first, with
// each key's vendor; not a key further away, nor one revoked. A bad span,
// or a VENDOR_ID beside --expiring, is a usage error (exit 2, the reason, then the usage line).
func TestKeyListExpiringAgainstBackend(t *testing.T) {
	h := startBackend(t)
	vendor := func(company string) string {
		v := decodeInto[view.Vendor](t, h.ctl("-o", "json", "vendor", "create", "--company", company, "--environment", "live"))
		h.ctl("vendor", "approve", v.VendorID)
		return v.VendorID
	}
	issue := func(vendorID, lifetime string) string {
		return decodeInto[view.IssuedKey](t, h.ctl("-o", "json", "key", "issue", vendorID, "--lifetime", lifetime)).KeyID
	}
	a, b := vendor("Expiring A"), vendor("Expiring B")
	aSoon, aLater := issue(a, "3d"), issue(a, "30d")
	bSoonest, bRevoked := issue(b, "2d"), issue(b, "1d")
	h.ctl("key", "revoke", bRevoked)

	keys := decodeInto[[]view.Key](t, h.ctl("-o", "json", "key", "list", "--expiring", "14d"))
	var got []string
	for _, k := range keys {
		got = append(got, k.KeyID)
	}
	if strings.Join(got, ",") != bSoonest+","+aSoon {
		t.Errorf("key list --expiring 14d = %v, want [%s %s] (B's 2-day key, then A's 3-day key; not A's 30-day key %s nor B's revoked %s)",
			got, bSoonest, aSoon, aLater, bRevoked)
	}
	out := h.ctl("key", "list", "--expiring", "14d")
	if line := lineWith(out, b); !strings.Contains(line, bSoonest) || !strings.Contains(line, "1d23h") {
		t.Errorf("the table does not show B's key with its vendor and time left:\n%s", out)
	}
	if keys := decodeInto[[]view.Key](t, h.ctl("-o", "json", "key", "list", "--expiring", "60d")); len(keys) != 3 {
		t.Errorf("key list --expiring 60d lists %d keys, want 3", len(keys))
	}
	for _, args := range [][]string{
		{"key", "list", "--expiring", "-1d"},
		{"key", "list", "--expiring", "soon"},
		{"key", "list", a, "--expiring", "14d"},
	} {
		if reason := h.ctlFails(2, args...); !strings.Contains(reason, "--expiring") {
			t.Errorf("%q: the reason does not name --expiring: %s", args, reason)
		}
	}
}
