package e2e

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestRefusalsNamedByTheBinary: the gateway binary, in process and on
// Redis, refuses a request past a daily quota and one past a sliding
// window with 429 rate_limited whose message names the policy, what it
// allows and when to retry, and logs each with "limit":"limited" and the
// policy's name (the gateway package's TestRefusalsNamed covers every
// kind; this is the shipped binary's own log and answer).
func TestRefusalsNamedByTheBinary(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name  string
		redis bool
	}{{"in process", false}, {"redis", true}} {
		t.Run(mode.name, func(t *testing.T) {
			s := newStack(t, stackOptions{redis: mode.redis, gatewayYAML: "limits:\n  policies:\n" +
				"    - {name: orders-day, scope: vendor, class: orders, kind: quota, rate: 1, window: day}\n" +
				"    - {name: reads-hour, scope: vendor, class: reads, kind: window, rate: 1, period: 1h}\n"})
			_, key := s.newVendor("sandbox", "mvr")
			for _, tc := range []struct {
				method, path, policy, message string
			}{
				{"POST", "/api/vendor/v1/orders", "orders-day", "orders-day: 1 a day; retry in "},
				{"GET", "/api/vendor/v1/me", "reads-hour", "reads-hour: 1 an hour; retry in "},
			} {
				url := s.gwURLs[0] + tc.path
				var body []byte
				hdr := map[string]string{}
				if tc.method == "POST" {
					body, hdr["Content-Type"] = []byte("{}"), "application/json"
				}
				if r := do(t, tc.method, url, key, body, hdr); r.status == 429 {
					t.Fatalf("the first %s %s: %d %s", tc.method, tc.path, r.status, r.body)
				}
				r := s.do(tc.method, url, key, body, hdr)
				var env struct {
					Error struct{ Code, Message string } `json:"error"`
				}
				_ = json.Unmarshal(r.body, &env)
				if r.status != 429 || env.Error.Code != "rate_limited" || !strings.HasPrefix(env.Error.Message, tc.message) || r.header.Get("Retry-After") == "" {
					t.Fatalf("the second %s %s: %d %s (Retry-After %q); want 429 rate_limited %q...", tc.method, tc.path, r.status, r.body, r.header.Get("Retry-After"), tc.message)
				}
				rid := r.header.Get("X-Request-Id")
				var line string
				for _, l := range strings.Split(s.gateways[0].logText(), "\n") {
					if strings.Contains(l, `"msg":"request"`) && strings.Contains(l, `"request_id":"`+rid+`"`) {
						line = l
					}
				}
				if !strings.Contains(line, `"limit":"limited"`) || !strings.Contains(line, `"policy":"`+tc.policy+`"`) {
					t.Fatalf("the refusal's access log line %q: want limit limited, policy %s", line, tc.policy)
				}
			}
		})
	}
}
