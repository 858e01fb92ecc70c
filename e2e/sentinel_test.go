package e2e

import (
	"testing"
	"time"

	"vendorgate/shared/testredis"
)

// TestRedisSentinel: gateway and backend find Redis through a Sentinel
// (GATEWAY_REDIS_MASTER_NAME), limits are counted there, and a revocation
// published through it reaches the gateway at once.
func TestRedisSentinel(t *testing.T) {
	t.Parallel()
	master := testredis.Start(t)
	sentinel := testredis.StartSentinel(t, master, "vgmaster")
	url := "redis://" + sentinel.Addr()
	s := newStack(t, stackOptions{
		gatewayEnv: map[string]string{"GATEWAY_REDIS_URL": url, "GATEWAY_REDIS_MASTER_NAME": "vgmaster"},
		backendEnv: map[string]string{"BACKEND_REDIS_URL": url, "BACKEND_REDIS_MASTER_NAME": "vgmaster"},
	})
	vendorID, key := s.newVendor("sandbox", "mvr")
	me := s.gwURLs[0] + "/api/vendor/v1/me"
	if r := s.do("GET", me, key, nil, nil); r.status != 200 {
		t.Fatalf("GET /me via Sentinel = %d %s", r.status, r.body)
	}
	if n := master.Do(t, "EVAL", "return #redis.call('KEYS', ARGV[1])", "0", "*"+vendorID+"*"); n == ":0" {
		t.Fatal("the limit was not counted on the master the Sentinel names")
	}

	var keys struct {
		Keys []struct {
			KeyID string `json:"key_id"`
		} `json:"keys"`
	}
	out := s.mustVendorctl("-o", "json", "key", "list", vendorID)
	decode(t, `{"keys":`+out+`}`, &keys)
	if len(keys.Keys) != 1 {
		t.Fatalf("key list: %s", out)
	}
	s.mustVendorctl("key", "revoke", keys.Keys[0].KeyID)
	// The cache TTL is 30 s: a 401 within a second can only come from the
	// invalidation published through the Sentinel's master.
	deadline := time.Now().Add(time.Second)
	for {
		r := s.do("GET", me, key, nil, nil)
		if r.status == 401 && r.errorCode() == "invalid_api_key" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a revoked key still answers %d a second after revocation", r.status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
