package e2e

import (
	"strings"
	"sync"
	"testing"
	"time"

	"vendorgate/shared/testredis"
)

// TestRedisClusterTwoGateways runs two gateways on a real 3-master Redis
// Cluster: the vendor's budget is exact across both, the loss of the slot's
// master fails closed, and its return heals without restarting anything.
func TestRedisClusterTwoGateways(t *testing.T) {
	// Not parallel: it times a fail-closed answer (2s) and counts GCRA's emission over the run.
	c := testredis.StartCluster(t)
	urls := strings.Join(c.URLs(), ",")
	s := newStack(t, stackOptions{
		gateways:   2,
		gatewayEnv: map[string]string{"GATEWAY_REDIS_URL": urls},
		backendEnv: map[string]string{"BACKEND_REDIS_URL": urls},
	})
	_, key := s.newVendor("sandbox", "mvr")

	var mu sync.Mutex
	admitted, limited := 0, 0
	var wg sync.WaitGroup
	start := time.Now()
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func(base string) {
			defer wg.Done()
			for i := 0; i < 80; i++ {
				r := do(t, "GET", base+"/api/vendor/v1/me", key, nil, nil)
				mu.Lock()
				switch r.status {
				case 200:
					admitted++
				case 429:
					limited++
				default:
					t.Errorf("read = %d %s", r.status, r.body)
				}
				mu.Unlock()
			}
		}(s.gwURLs[g])
	}
	wg.Wait()
	// Exact: the burst of 120 plus the tokens GCRA emitted during the run
	// (one every 0.5 s), never more.
	budget := 120 + int(time.Since(start)/(500*time.Millisecond)) + 1
	if admitted < 120 || admitted > budget || admitted+limited != 160 {
		t.Fatalf("two gateways on a cluster admitted %d and limited %d of 160 reads; want 120 to %d admitted", admitted, limited, budget)
	}
	t.Logf("two gateways on a 3-master cluster admitted %d of 160 reads against a budget of 120 (+%d emitted during the run)", admitted, budget-121)

	// A second vendor, under its limit (the first is remembered as over it,
	// which answers 429 with no Redis call at all), and the node holding
	// its limit key.
	vendor2, key2 := s.newVendor("sandbox", "mvr")
	if r := do(t, "GET", s.gwURLs[0]+"/api/vendor/v1/me", key2, nil, nil); r.status != 200 {
		t.Fatalf("second vendor's first read = %d %s", r.status, r.body)
	}
	var owner *testredis.Server
	for _, n := range c.Nodes {
		if out := n.Do(t, "EVAL", "return #redis.call('KEYS', ARGV[1])", "0", "*"+vendor2+"*"); out != ":0" {
			owner = n
		}
	}
	if owner == nil {
		t.Fatal("no cluster node holds a key naming the vendor")
	}
	owner.Stop()
	for _, base := range s.gwURLs {
		start := time.Now()
		r := do(t, "GET", base+"/api/vendor/v1/me", key2, nil, nil)
		if r.status != 503 || r.errorCode() != "rate_limit_unavailable" {
			t.Fatalf("with the slot's master stopped: %d %s", r.status, r.body)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("fail-closed answer took %s", d)
		}
	}

	owner.Restart(t)
	c.WaitOK(t)
	_, fresh := s.newVendor("sandbox", "mvr")
	deadline := time.Now().Add(20 * time.Second)
	for _, base := range s.gwURLs {
		for {
			r := do(t, "GET", base+"/api/vendor/v1/me", fresh, nil, nil)
			if r.status == 200 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("gateway %s not recovered after the master returned: %d %s", base, r.status, r.body)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}
