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
	t.Parallel()
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

// waitPushed waits until the gateway's key cache metric says the backend's
// invalidations reach it (1) or not (0): the gateway's own account of its
// subscription, the event the steps below wait for.
func (s *stack) waitPushed(gw int, want float64) {
	s.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := metric(scrape(s.t, s.gwAdmin[gw]), "vendorgate_gateway_key_cache_pushed")
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("vendorgate_gateway_key_cache_pushed is %v after 20s, want %v", got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRevocationDuringRedisOutage: with the Redis that carries invalidations
// down, a revocation and a suspension cannot be published. The admin answers
// say so ("published": false) and vendorctl does not claim the gateways
// refuse the key now; it gives the deadline that holds and says how to
// publish again. Once Redis is back and the gateway has subscribed again,
// the gateway refuses the revoked key at once: it dropped the keys it had
// cached while it could have missed an announcement, so a missed
// revocation lasts no longer than the outage.
func TestRevocationDuringRedisOutage(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{redis: true})
	gw := s.gwURLs[0]
	s.waitPushed(0, 1)
	vendorID, key := s.newVendor("sandbox", "mvr")
	suspended, _ := s.newVendor("sandbox", "mvr")
	keyID := s.keyID(vendorID)
	if r := s.do("GET", gw+"/api/vendor/v1/me", key, nil, nil); r.status != 200 { // cached while pushes flow
		t.Fatalf("before the outage: %d %s", r.status, r.body)
	}

	s.redis.Stop()
	s.waitPushed(0, 0)
	out := s.mustVendorctl("key", "revoke", keyID)
	if strings.Contains(out, "refuses this key now") || !strings.Contains(out, "could not publish") ||
		!strings.Contains(out, "key_cache.ttl") || !strings.Contains(out, "vendorctl key revoke "+keyID) {
		t.Errorf("revoke with the backend's Redis down:\n%s", out)
	}
	var revoked struct {
		Published    *bool  `json:"published"`
		Invalidation string `json:"invalidation"`
	}
	decode(t, s.mustVendorctl("-o", "json", "key", "revoke", keyID), &revoked)
	if revoked.Published == nil || *revoked.Published || revoked.Invalidation != "publish_failed" {
		t.Errorf("revoke -o json with Redis down: published %v, invalidation %q; want false, publish_failed", revoked.Published, revoked.Invalidation)
	}
	var suspend struct {
		Status       string `json:"status"`
		Published    *bool  `json:"published"`
		Invalidation string `json:"invalidation"`
	}
	decode(t, s.mustVendorctl("-o", "json", "vendor", "suspend", suspended), &suspend)
	if suspend.Status != "suspended" || suspend.Published == nil || *suspend.Published || suspend.Invalidation != "publish_failed" {
		t.Errorf("suspend -o json with Redis down: %+v; want suspended, published false, publish_failed", suspend)
	}
	if !strings.Contains(s.backend.logText(), "invalidation not published") {
		t.Error("the backend did not log the failed publish")
	}

	s.redis.Restart(t)
	s.waitPushed(0, 1)
	if r := s.do("GET", gw+"/api/vendor/v1/me", key, nil, nil); r.status != 401 {
		t.Errorf("the revoked key, Redis back and the gateway subscribed again: %d %s; want 401", r.status, r.body)
	}
	var again struct {
		Published    bool   `json:"published"`
		Invalidation string `json:"invalidation"`
	}
	decode(t, s.mustVendorctl("-o", "json", "key", "revoke", keyID), &again)
	if !again.Published || again.Invalidation != "redis" {
		t.Errorf("revoke again with Redis back: %+v; want published, redis", again)
	}
}
