package backend

import (
	"context"
	"strconv"
	"testing"
	"time"

	"vendorgate/backend/store/postgres"
	"vendorgate/shared/testpg"
)

// A database that is down is a dependency failing, not a bug: reads and
// order placement answer 503 request_failed with Retry-After (as the
// gateway's breaker does), never 500 internal_error; and the same calls
// are served again once the database is back.
func TestDatabaseDownAnswers503(t *testing.T) {
	srv := testpg.Start(t)
	url := srv.CreateDB(t, "down")
	h := start(t, func(o *Options) {
		st, err := postgres.Open(context.Background(), postgres.Options{URL: url})
		if err != nil {
			t.Fatal(err)
		}
		o.Store = st
	})
	v := h.newVendor("sandbox", allServices...)
	if r := h.vendorCall(v, "GET", "/api/vendor/v1/orders", nil, ""); r.status != 200 {
		t.Fatalf("before the outage: %d %s", r.status, r.body)
	}
	// testpg runs with synchronous_commit off: give the WAL writer (200ms)
	// time to write the schema and the vendor before the immediate stop,
	// which would otherwise lose them.
	time.Sleep(time.Second)
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	check := func(what string, r resp) {
		t.Helper()
		code, _, _ := r.envelope(t)
		ra, err := strconv.Atoi(r.header.Get("Retry-After"))
		if r.status != 503 || code != "request_failed" || err != nil || ra < 1 {
			t.Errorf("%s with the database down: %d %s (Retry-After %q), want 503 request_failed with Retry-After",
				what, r.status, r.body, r.header.Get("Retry-After"))
		}
	}
	for i := range 3 { // the pool's connections die one after another
		check("GET /orders "+strconv.Itoa(i), h.vendorCall(v, "GET", "/api/vendor/v1/orders", nil, ""))
	}
	check("GET /me", h.vendorCall(v, "GET", "/api/vendor/v1/me", nil, ""))
	check("POST /orders", h.place(v, "down-1", orderBody("D7654321")))
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	// The pool may hold a connection from before the outage: the first
	// calls after it can still fail (503), then the pool reconnects.
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := h.vendorCall(v, "GET", "/api/vendor/v1/orders", nil, "")
		if r.status == 200 {
			break
		}
		if r.status != 503 || time.Now().After(deadline) {
			t.Fatalf("after the outage: %d %s", r.status, r.body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
