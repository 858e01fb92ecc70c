package auth

import (
	"testing"
	"time"
	"unsafe"

	"vendorgate/shared/apikey"
	"vendorgate/shared/wire"
)

// TestIdentityNames: an identity says the environment and status the
// backend named when the gateway knows them, "" (no prefix, not approved)
// when it does not; two answers with different known statuses are not the
// same identity. A cached key's identity fits the allocator's 80-byte
// class (two status strings kept it in the 112-byte one).
func TestIdentityNames(t *testing.T) {
	res := func(env, status string) *wire.KeyResolution {
		return &wire.KeyResolution{KeyID: "k", VendorID: "v", Environment: env, ExpiresAt: time.Now().Add(time.Hour),
			Vendor: wire.VendorInfo{Status: status}}
	}
	for _, c := range []struct{ env, status, wantEnv, wantStatus string }{
		{apikey.Live, wire.VendorApproved, apikey.Live, wire.VendorApproved},
		{apikey.Sandbox, wire.VendorPending, apikey.Sandbox, wire.VendorPending},
		{apikey.Live, wire.VendorSuspended, apikey.Live, wire.VendorSuspended},
		{"staging", "closed", "", ""},
	} {
		id := identityOf(res(c.env, c.status))
		if id.Environment() != c.wantEnv || id.Status() != c.wantStatus {
			t.Errorf("%s, %s: identity says %q, %q; want %q, %q", c.env, c.status, id.Environment(), id.Status(), c.wantEnv, c.wantStatus)
		}
	}
	a, b := identityOf(res(apikey.Live, wire.VendorApproved)), identityOf(res(apikey.Live, wire.VendorSuspended))
	b.expiresAt = a.expiresAt
	if a.same(b) {
		t.Error("an approved and a suspended vendor's identities read as the same")
	}
	if size := unsafe.Sizeof(Identity{}); size > 80 {
		t.Errorf("an Identity is %d bytes, past the 80-byte size class", size)
	}
}
