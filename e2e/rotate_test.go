package e2e

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// rotated is what `vendorctl -o json key rotate` prints.
type rotated struct {
	Key         string `json:"key"`
	KeyID       string `json:"key_id"`
	RotatedFrom string `json:"rotated_from"`
	OldKey      struct {
		KeyID      string     `json:"key_id"`
		ReplacedBy *string    `json:"replaced_by"`
		RevokeAt   *time.Time `json:"revoke_at"`
		RevokedAt  *time.Time `json:"revoked_at"`
	} `json:"old_key"`
	Invalidation string `json:"invalidation"`
}

// vendorctlExit runs vendorctl and returns its exit status and stderr.
func (s *stack) vendorctlExit(args ...string) (int, string) {
	s.t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "vendorctl"), args...)
	cmd.Env = append(os.Environ(), "VENDORCTL_ADMIN_URL="+s.adminURL, "VENDORCTL_ADMIN_TOKEN="+adminToken)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, stderr.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), stderr.String()
	}
	s.t.Fatal(err)
	return 0, ""
}

// until polls every gateway with key until each answers want, for at most
// limit, and fails naming the gateway that did not.
func (s *stack) until(key string, want int, limit time.Duration, why string) {
	s.t.Helper()
	deadline := time.Now().Add(limit)
	for i, gw := range s.gwURLs {
		for {
			r := do(s.t, "GET", gw+"/api/vendor/v1/me", key, nil, nil)
			if r.status == want {
				if want == 401 && r.errorCode() != "invalid_api_key" {
					s.t.Errorf("gateway %d: %s: 401 %s, want invalid_api_key", i, why, r.errorCode())
				}
				break
			}
			if time.Now().After(deadline) {
				s.t.Fatalf("gateway %d: %s: still %d %s after %v, want %d", i, why, r.status, r.body, limit, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// TestKeyRotation: `vendorctl key rotate` issues a second key for the
// vendor and records the pair; both keys work at every gateway during the
// overlap, `key list` shows the pair and the time left, and at the end of
// the overlap the old key answers 401 invalid_api_key at every gateway at
// once: the gateways cache a working key for 15 minutes while Redis pushes
// revocations (key_cache.pushed_ttl), so only the published revocation can
// make them refuse it within seconds. --overlap 0 (a leaked key) revokes
// the old key now. Bad input gets vendorctl's exits: a negative overlap 2
// with the usage line, an unknown key 1 with not_found, a key revoked
// already 1 with the API's conflict.
func TestKeyRotation(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{redis: true, gateways: 2})
	vendorID, oldKey := s.newVendor("sandbox", "mvr")
	oldID := s.keyID(vendorID)
	s.until(oldKey, 200, 5*time.Second, "the first key before its rotation")

	const overlap = 8 * time.Second
	var r rotated
	decode(t, s.mustVendorctl("-o", "json", "key", "rotate", oldID, "--overlap", overlap.String()), &r)
	if r.Key == "" || r.RotatedFrom != oldID || r.OldKey.KeyID != oldID || r.OldKey.ReplacedBy == nil || *r.OldKey.ReplacedBy != r.KeyID {
		t.Fatalf("rotate answered %+v: want a new key naming %s, and the old key naming the new one", r, oldID)
	}
	if r.OldKey.RevokeAt == nil || r.OldKey.RevokedAt != nil || r.Invalidation != "redis" {
		t.Fatalf("rotate answered old key revoke_at=%v revoked_at=%v invalidation=%q: want a revocation scheduled, none yet, published through Redis",
			r.OldKey.RevokeAt, r.OldKey.RevokedAt, r.Invalidation)
	}
	revokeAt := *r.OldKey.RevokeAt

	// During the overlap both keys work at every gateway.
	s.until(r.Key, 200, 5*time.Second, "the new key during the overlap")
	s.until(oldKey, 200, time.Second, "the old key during the overlap")
	if time.Now().After(revokeAt) {
		t.Fatalf("the overlap (%v) ended before the keys were checked: the machine is too slow for this test's overlap", overlap)
	}
	list := s.mustVendorctl("key", "list", vendorID)
	oldLine, newLine := lineOf(list, oldID), lineOf(list, r.KeyID)
	if !strings.Contains(oldLine, "rotating") || !strings.Contains(oldLine, "replaced by "+r.KeyID) ||
		!strings.Contains(newLine, "active") || !strings.Contains(newLine, "replaces "+oldID) {
		t.Errorf("key list during the overlap does not show the pair:\n%s", list)
	}
	if f := strings.Fields(oldLine); len(f) < 4 || !strings.HasSuffix(f[3], "s") {
		t.Errorf("key list does not show the old key's seconds left in its LEFT column:\n%s", list)
	}

	// After it the old key is refused at every gateway within seconds; the
	// new one still works.
	time.Sleep(time.Until(revokeAt))
	s.until(oldKey, 401, 10*time.Second, "the old key after its overlap")
	s.until(r.Key, 200, time.Second, "the new key after the overlap")
	list = s.mustVendorctl("key", "list", vendorID)
	if !strings.Contains(lineOf(list, oldID), "revoked") {
		t.Errorf("key list after the overlap does not show the old key revoked:\n%s", list)
	}

	// A leaked key: --overlap 0 revokes it now.
	var leak rotated
	decode(t, s.mustVendorctl("-o", "json", "key", "rotate", r.KeyID, "--overlap", "0"), &leak)
	if leak.OldKey.RevokedAt == nil {
		t.Errorf("rotate --overlap 0 left the old key unrevoked: %+v", leak.OldKey)
	}
	s.until(r.Key, 401, 10*time.Second, "a key rotated with no overlap")
	s.until(leak.Key, 200, 5*time.Second, "the key that replaced a leaked one")

	// Bad input.
	code, stderr := s.vendorctlExit("key", "rotate", leak.KeyID, "--overlap", "-1h")
	if code != 2 || !strings.Contains(stderr, "negative") || !strings.Contains(stderr, "usage: vendorctl key rotate") {
		t.Errorf("rotate --overlap -1h: exit %d %q, want 2 with the reason and the usage line", code, stderr)
	}
	code, stderr = s.vendorctlExit("key", "rotate", uuid.NewString())
	if code != 1 || !strings.Contains(stderr, "not_found") {
		t.Errorf("rotate of an unknown key: exit %d %q, want 1 with not_found", code, stderr)
	}
	code, stderr = s.vendorctlExit("key", "rotate", oldID)
	if code != 1 || !strings.Contains(stderr, "request_failed") {
		t.Errorf("rotate of a revoked key: exit %d %q, want 1 with the API's request_failed", code, stderr)
	}
}

// lineOf is the line of out that starts with s, or "".
func lineOf(out, s string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, s) {
			return l
		}
	}
	return ""
}

// TestKeyExpirationHeaderEndToEnd: a key issued for 3 days gets
// X-API-Key-Expiration, its expires_at as key issue printed it, on a
// documented answer that conforms to the OpenAPI document; a key issued
// for the default 90 days gets none.
func TestKeyExpirationHeaderEndToEnd(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	vendorID, longKey := s.newVendor("sandbox", "mvr")
	var k struct {
		Key       string    `json:"key"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	decode(t, s.mustVendorctl("-o", "json", "key", "issue", vendorID, "--lifetime", "3d"), &k)
	url := s.gwURLs[0] + "/api/vendor/v1/orders/" + uuid.NewString()
	r := s.do("GET", url, k.Key, nil, nil) // checked against the OpenAPI document
	if got := r.header.Get("X-API-Key-Expiration"); r.status != 404 || got != k.ExpiresAt.UTC().Format(time.RFC3339) {
		t.Errorf("a 3-day key: %d, X-API-Key-Expiration %q, want 404 and %q", r.status, got, k.ExpiresAt.UTC().Format(time.RFC3339))
	}
	if r := s.do("GET", url, longKey, nil, nil); r.header.Get("X-API-Key-Expiration") != "" {
		t.Errorf("a 90-day key got X-API-Key-Expiration %q", r.header.Get("X-API-Key-Expiration"))
	}
}
