package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"vendorgate/bench/internal/wrk"
	"vendorgate/shared/testpg"
	"vendorgate/shared/testredis"
)

// TestScaleoutSmoke runs the whole measurement with a 2-second load bound:
// the real binaries on PostgreSQL and a 3-master Redis Cluster. Every
// gateway answers reads, and one vendor's limit admits exactly its budget
// across both gateways.
func TestScaleoutSmoke(t *testing.T) {
	out := filepath.Join(t.TempDir(), "scaleout.md")
	var buf bytes.Buffer
	res, err := run(context.Background(), options{
		load: 2 * time.Second, conns: 16, limitFor: 2 * time.Second, workers: 4, failFor: 1500 * time.Millisecond,
		// A generous Redis timeout: the test asserts no 503 under load on a
		// shared machine, where a 250ms stall is not an outage.
		redisTimeout: time.Second, out: out, timeout: 150 * time.Second,
	}, &buf)
	if errors.Is(err, testpg.ErrNotInstalled) || errors.Is(err, testredis.ErrNotInstalled) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatalf("run: %v\n%s", err, buf.String())
	}
	table := buf.String()
	t.Log("\n" + table)

	// The printed table: a non-zero 2xx rate on each gateway and in total.
	rows := regexp.MustCompile(`(?m)^\s*(gateway-1|gateway-2|total)\s+(\d+)\s`).FindAllStringSubmatch(table, -1)
	if len(rows) != 3 {
		t.Fatalf("table has %d gateway/total rows, want 3:\n%s", len(rows), table)
	}
	for _, r := range rows {
		if n, _ := strconv.Atoi(r[2]); n <= 0 {
			t.Errorf("%s: %s req/s", r[1], r[2])
		}
	}
	for _, l := range res.load {
		if l.non2xx != 0 || l.errors != 0 {
			t.Errorf("%s: %d non-2xx answers and %d errors under load, want none", l.gateway, l.non2xx, l.errors)
		}
	}

	// Exact limits: admitted within [floor, budget], only 200 and 429.
	if !strings.Contains(table, ": EXACT") {
		t.Errorf("the limit line does not say EXACT:\n%s", table)
	}
	l := res.limit
	if l.admitted < 120 || l.admitted > l.budget() || l.limited == 0 {
		t.Errorf("admitted %d (budget %d, floor %d), limited %d", l.admitted, l.budget(), l.floor(), l.limited)
	}

	// Failures: each part's return heals without a restart; a dead backend
	// leaves the other serving; a lost Redis master fails closed.
	if len(res.failures) != 3 {
		t.Fatalf("%d failure runs, want 3", len(res.failures))
	}
	for _, f := range res.failures {
		if f.recovered < 0 {
			t.Errorf("%s: no 200 on both gateways after it returned (%s)", f.part, f.summary())
		}
	}
	if res.failures[0].answers["200"] == 0 {
		t.Errorf("%s: no read answered 200 by the other backend (%s)", res.failures[0].part, res.failures[0].summary())
	}
	redis := res.failures[2]
	if redis.answers["503 rate_limit_unavailable"] == 0 {
		t.Errorf("%s: no 503 rate_limit_unavailable (%s)", redis.part, redis.summary())
	}
	// What the gateways admitted without Redis is at most the leases they
	// held: lease_max tokens a gateway.
	if n := redis.answers["200"]; n > len(res.load)*leaseMax {
		t.Errorf("%s: %d reads answered 200, more than %d gateways' leases of %d tokens allow (%s)", redis.part, n, len(res.load), leaseMax, redis.summary())
	}
	for k := range redis.answers {
		if k != "200" && k != "503 rate_limit_unavailable" {
			t.Errorf("%s: answered %q; want 200 or a fail-closed 503 rate_limit_unavailable", redis.part, k)
		}
	}

	md, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Machine", "load average", "| **total** |", "admitted (200)", "| verdict | exact |", "## One part down at a time"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("the report lacks %q", want)
		}
	}
}

// The budget arithmetic: the burst plus one request per emission interval.
func TestExactnessBounds(t *testing.T) {
	e := exactness{rate: 120, period: time.Minute, admitted: 124, elapsed: 2100 * time.Millisecond, inner: 1600 * time.Millisecond, other: map[int]int{}}
	if e.interval() != 500*time.Millisecond || e.budget() != 124 || e.floor() != 123 || !e.exact() {
		t.Errorf("interval %s budget %d floor %d exact %v", e.interval(), e.budget(), e.floor(), e.exact())
	}
	e.admitted = 125
	if e.exact() {
		t.Error("one over the budget reads as exact")
	}
	e.admitted, e.other[503] = 123, 1
	if e.exact() {
		t.Error("a 503 reads as exact")
	}
}

// A gateway's throughput counts 2xx answers only; socket errors are apart
// from non-2xx answers.
func TestFromWrk(t *testing.T) {
	got := fromWrk("gateway-1", wrk.Summary{Requests: 100, Elapsed: 2 * time.Second, P50: 1500 * time.Microsecond,
		P99: 9 * time.Millisecond, Read: 1, Status: 10, Timeout: 2})
	if got.gateway != "gateway-1" || got.requests != 100 || got.non2xx != 10 || got.errors != 3 || got.p99 != 9*time.Millisecond || got.rps() != 45 {
		t.Errorf("%+v rps %v", got, got.rps())
	}
}
