package gateway

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"vendorgate/shared/apierr"
	"vendorgate/shared/wire"
)

// TestKeyExpirationHeader: every answer to a key that expires within
// key_expiry_warning (14 days by default) carries X-API-Key-Expiration, the
// key's expiry in RFC 3339 UTC, a refusal as well as a proxied answer; a
// key further from its expiry gets none, and the window is the setting's.
func TestKeyExpirationHeader(t *testing.T) {
	b := newTestBackend(t)
	gw := startGateway(t, b, nil)
	if gw.cfg.KeyExpiryWarning != 14*24*time.Hour {
		t.Fatalf("key_expiry_warning defaults to %v, want 14d", gw.cfg.KeyExpiryWarning)
	}
	soon := time.Now().Add(3 * 24 * time.Hour).Truncate(time.Second).UTC()
	later := time.Now().Add(30 * 24 * time.Hour).Truncate(time.Second).UTC()
	soonKey, _ := b.addKey("vendor-soon", wire.VendorApproved, soon)
	laterKey, _ := b.addKey("vendor-later", wire.VendorApproved, later)
	pendingKey, _ := b.addKey("vendor-pending", wire.VendorPending, soon)
	url := gw.url + "/api/vendor/v1/orders/fast"

	a := do(t, "GET", url, soonKey)
	if a.status != http.StatusOK {
		t.Fatalf("a key expiring in 3 days: %d %s", a.status, a.body)
	}
	if got := a.header.Get("X-API-Key-Expiration"); got != soon.Format(time.RFC3339) {
		t.Errorf("a key expiring in 3 days: X-API-Key-Expiration %q, want %q", got, soon.Format(time.RFC3339))
	}
	a = do(t, "GET", url, pendingKey)
	a.wantError(t, http.StatusForbidden, apierr.AccountNotApproved)
	if got := a.header.Get("X-API-Key-Expiration"); got != soon.Format(time.RFC3339) {
		t.Errorf("a refusal to a key expiring in 3 days: X-API-Key-Expiration %q, want %q", got, soon.Format(time.RFC3339))
	}
	a = do(t, "GET", url, laterKey)
	if a.status != http.StatusOK {
		t.Fatalf("a key expiring in 30 days: %d %s", a.status, a.body)
	}
	if got, ok := a.header["X-Api-Key-Expiration"]; ok {
		t.Errorf("a key expiring in 30 days, outside the 14-day window, got X-API-Key-Expiration %q", got)
	}

	// The header is documented: in the OpenAPI document, and on /docs with
	// each operation's answers.
	for _, path := range []string{"/openapi.json", "/docs"} {
		if a := do(t, "GET", gw.url+path, ""); a.status != http.StatusOK || !strings.Contains(string(a.body), "X-API-Key-Expiration") {
			t.Errorf("GET %s: %d, X-API-Key-Expiration not in it", path, a.status)
		}
	}

	wide := startGateway(t, b, func(o *Options) { o.Config.KeyExpiryWarning = 60 * 24 * time.Hour })
	a = do(t, "GET", wide.url+"/api/vendor/v1/orders/fast", laterKey)
	if got := a.header.Get("X-API-Key-Expiration"); got != later.Format(time.RFC3339) {
		t.Errorf("key_expiry_warning 60d, a key expiring in 30 days: X-API-Key-Expiration %q, want %q", got, later.Format(time.RFC3339))
	}
}

// TestRotatedKeyRefusedAtRevokeAt: a key whose lookup names a rotation's
// revoke_at is refused 401 invalid_api_key from that time on by the
// gateway itself, while its entry is still cached (key_cache.ttl 10m here)
// and though no revocation was published or looked up: a lost publish
// does not leave the old key working.
func TestRotatedKeyRefusedAtRevokeAt(t *testing.T) {
	b := newTestBackend(t)
	gw := startGateway(t, b, func(o *Options) { o.Config.KeyCache.TTL = 10 * time.Minute })
	key, _ := b.addKey("vendor-rotating", wire.VendorApproved, time.Now().Add(90*24*time.Hour))
	revokeAt := time.Now().Add(time.Second)
	b.update(key, func(r *wire.KeyResolution) { r.RevokeAt = &revokeAt })
	url := gw.url + "/api/vendor/v1/orders/fast"
	if a := do(t, "GET", url, key); a.status != http.StatusOK {
		t.Fatalf("during the overlap: %d %s", a.status, a.body)
	}
	for deadline := revokeAt.Add(5 * time.Second); ; {
		a := do(t, "GET", url, key)
		if a.status == http.StatusUnauthorized {
			a.wantError(t, http.StatusUnauthorized, apierr.InvalidAPIKey)
			if time.Now().Before(revokeAt) {
				t.Errorf("refused before its revoke_at")
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("5s after its revoke_at the cached key still answers %d", a.status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
