package e2e

import (
	"strings"
	"testing"
	"time"
)

// keyID is the id of the vendor's only key.
func (s *stack) keyID(vendorID string) string {
	s.t.Helper()
	var keys []struct {
		KeyID string `json:"key_id"`
	}
	decode(s.t, s.mustVendorctl("-o", "json", "key", "list", vendorID), &keys)
	if len(keys) != 1 {
		s.t.Fatalf("vendor %s has %d keys", vendorID, len(keys))
	}
	return keys[0].KeyID
}

// TestRevokeSaysWhenGatewaysRefuse: `vendorctl key revoke` says when every
// gateway will refuse the key: now where the backend publishes the
// revocation through Redis (and the gateway does refuse it at once), within
// the gateways' key cache TTL where it has no Redis (and the gateway still
// serves the cached key meanwhile, as it said).
func TestRevokeSaysWhenGatewaysRefuse(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		s := newStack(t, stackOptions{redis: true})
		vendorID, key := s.newVendor("sandbox", "mvr")
		if r := s.do("GET", s.gwURLs[0]+"/api/vendor/v1/me", key, nil, nil); r.status != 200 {
			t.Fatalf("before revoke: %d %s", r.status, r.body)
		}
		out := s.mustVendorctl("key", "revoke", s.keyID(vendorID))
		if !strings.Contains(out, "Every gateway refuses this key now") {
			t.Errorf("revoke with Redis does not say the key is refused now:\n%s", out)
		}
		deadline := time.Now().Add(2 * time.Second)
		for {
			r := s.do("GET", s.gwURLs[0]+"/api/vendor/v1/me", key, nil, nil)
			if r.status == 401 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the gateway still answers %d 2s after a revocation it was told of at once", r.status)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	t.Run("no redis", func(t *testing.T) {
		s := newStack(t, stackOptions{})
		vendorID, key := s.newVendor("sandbox", "mvr")
		if r := s.do("GET", s.gwURLs[0]+"/api/vendor/v1/me", key, nil, nil); r.status != 200 {
			t.Fatalf("before revoke: %d %s", r.status, r.body)
		}
		id := s.keyID(vendorID)
		out := s.mustVendorctl("key", "revoke", id)
		if !strings.Contains(out, "within each gateway's key_cache.ttl") || strings.Contains(out, "refuses this key now") {
			t.Errorf("revoke without Redis does not say the key is refused only within the cache TTL:\n%s", out)
		}
		if r := s.do("GET", s.gwURLs[0]+"/api/vendor/v1/me", key, nil, nil); r.status != 200 {
			t.Errorf("right after the revocation the gateway answers %d: the cached key was dropped, so the message overstates the delay", r.status)
		}
		var j struct {
			Invalidation string `json:"invalidation"`
		}
		decode(t, s.mustVendorctl("-o", "json", "key", "revoke", id), &j)
		if j.Invalidation != "cache_ttl" {
			t.Errorf("revoke -o json invalidation = %q, want cache_ttl", j.Invalidation)
		}
	})
}
