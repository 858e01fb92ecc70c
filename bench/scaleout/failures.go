package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"vendorgate/config"
)

// failure is what vendors saw while one part was down, and how long the
// stack took to answer 200 again on both gateways once it was back.
type failure struct {
	part      string
	answers   map[string]int // "200", "503 request_failed", "error", ...
	uncached  string         // the answer to a key no gateway had cached, where tried
	recovered time.Duration  // -1: not within the bound
}

func (f failure) summary() string {
	var parts []string
	for k, n := range f.answers {
		parts = append(parts, fmt.Sprintf("%d× %s", n, k))
	}
	sort.Slice(parts, func(i, j int) bool {
		a, _ := strconv.Atoi(strings.SplitN(parts[i], "×", 2)[0])
		b, _ := strconv.Atoi(strings.SplitN(parts[j], "×", 2)[0])
		return a > b
	})
	return strings.Join(parts, ", ")
}

func (f failure) recovery() string {
	if f.recovered < 0 {
		return "not recovered"
	}
	return fmt.Sprintf("%.1f s", f.recovered.Seconds())
}

// answer sends one GET /me and names the answer: the status and, for an
// error, the envelope's code.
func answer(ctx context.Context, client *http.Client, gw, key string) string {
	req, _ := http.NewRequestWithContext(ctx, "GET", gw+"/api/vendor/v1/me", nil)
	req.Header.Set("X-API-Key", key)
	resp, err := client.Do(req)
	if err != nil {
		return "transport error"
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode < 300 {
		return strconv.Itoa(resp.StatusCode)
	}
	var env struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(b, &env)
	return strconv.Itoa(resp.StatusCode) + " " + env.Error.Code
}

// probe reads GET /me through both gateways in turn for d, 20 a second.
func probe(ctx context.Context, client *http.Client, gws []string, key string, d time.Duration) map[string]int {
	out := map[string]int{}
	end := time.Now().Add(d)
	for i := 0; time.Now().Before(end) && ctx.Err() == nil; i++ {
		out[answer(ctx, client, gws[i%len(gws)], key)]++
		time.Sleep(50 * time.Millisecond)
	}
	return out
}

// recover waits until both gateways answer 200 to key.
func recoverTime(ctx context.Context, client *http.Client, gws []string, key string, bound time.Duration) time.Duration {
	start := time.Now()
	for time.Since(start) < bound && ctx.Err() == nil {
		ok := true
		for _, gw := range gws {
			ok = ok && answer(ctx, client, gw, key) == "200"
		}
		if ok {
			return time.Since(start)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return -1
}

// leaseTTL and leaseMax are the gateways' redis.lease_ttl and
// redis.lease_max (their defaults: gatewayYAML sets neither).
var leaseTTL, leaseMax = gatewayRedis.LeaseTTL, gatewayRedis.LeaseMax

var gatewayRedis = config.DefaultGateway().Redis

// runFailures takes one part down at a time, for d each, while a vendor
// reads through both gateways, then brings it back. spare is a key no
// gateway has seen, for the PostgreSQL outage.
func runFailures(ctx context.Context, s *stack, vendorID, key, spare string, d time.Duration) ([]failure, error) {
	client := &http.Client{Timeout: 3 * time.Second}
	defer client.CloseIdleConnections()
	var out []failure

	// One backend killed: its breaker opens, the other serves.
	b := s.bprocs[0]
	b.p.Kill()
	f := failure{part: "one backend killed (SIGKILL)", answers: probe(ctx, client, s.gws, key, d)}
	if err := b.start(); err != nil {
		return nil, err
	}
	if err := waitReady(ctx, s.admins[0]+"/readyz", b.p); err != nil {
		return nil, err
	}
	f.recovered = recoverTime(ctx, client, s.gws, key, 30*time.Second)
	out = append(out, f)

	// PostgreSQL stopped: both backends lose the database at once.
	if err := s.pg.Stop(); err != nil {
		return nil, err
	}
	f = failure{part: "PostgreSQL stopped", answers: probe(ctx, client, s.gws, key, d)}
	f.uncached = answer(ctx, client, s.gws[0], spare)
	if err := s.pg.Restart(); err != nil {
		return nil, err
	}
	f.recovered = recoverTime(ctx, client, s.gws, key, 30*time.Second)
	out = append(out, f)

	// The Redis master holding the vendor's limit stopped: its slots have
	// no replica to fail over to. It is the owner of the slot of the
	// vendor's hash tag, which every bucket of the vendor carries (not the
	// last master by default: a master stopped that holds nothing of the
	// vendor's leaves the limit answering, 64 reads of 66 admitted).
	n, err := s.cluster.Owner("{v:" + vendorID + "}")
	if err != nil {
		return nil, fmt.Errorf("the master of vendor %s's limit: %w", vendorID, err)
	}
	n.Stop()
	// Each gateway may go on spending the lease it holds without Redis
	// (up to redis.lease_max tokens, for redis.lease_ttl: the gateways run
	// with the defaults), and the probe's last request before the stop
	// took one: the probe outlasts the leases, so that what comes after
	// them is seen whatever d is. (A 1.5 s probe, 20 reads a second, could
	// be answered from two 16-token leases whole: 28 reads, 14 a gateway,
	// all 200.)
	f = failure{part: "the Redis master holding the vendor's limit stopped (1 of 3)", answers: probe(ctx, client, s.gws, key, d+leaseTTL)}
	if err := n.Rerun(); err != nil {
		return nil, err
	}
	f.recovered = recoverTime(ctx, client, s.gws, key, 40*time.Second)
	out = append(out, f)
	return out, ctx.Err()
}
