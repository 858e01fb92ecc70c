package accesslog

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"vendorgate/shared/apierr"
)

// TestRefusalsBoundedBySecondAndSummarised: perSecond lines of a code are
// written in full each second, the rest counted by code, route and status
// and written as one summary line each at the next flush, sorted; a new
// second writes in full again.
func TestRefusalsBoundedBySecondAndSummarised(t *testing.T) {
	r := NewRefusals(2)
	at := time.Unix(1_800_000_000, 0)
	var full int
	for i := range 5 {
		if r.Admit(apierr.RateLimited, "orders", 429, at.Add(time.Duration(i)*time.Millisecond)) {
			full++
		}
	}
	for range 2 {
		if !r.Admit(apierr.RequestFailed, "orders", 503, at) {
			t.Error("another code's first lines not written in full")
		}
	}
	if r.Admit(apierr.RequestFailed, "me", 503, at) {
		t.Error("a third 503 of the second written in full")
	}
	if full != 2 {
		t.Errorf("%d of 5 written in full, want 2", full)
	}
	if !r.Admit(apierr.RateLimited, "orders", 429, at.Add(time.Second)) {
		t.Error("the next second's first line not written in full")
	}
	var out bytes.Buffer
	r.Flush(slog.New(slog.NewTextHandler(&out, nil)))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 summary lines, got:\n%s", out.String())
	}
	for i, want := range []string{
		`msg="requests refused" error=rate_limited status=429 route=orders count=3 first=2027-01-15T08:00:00.002Z last=2027-01-15T08:00:00.004Z`,
		`msg="requests refused" error=request_failed status=503 route=me count=1`,
	} {
		if !strings.Contains(lines[i], want) {
			t.Errorf("line %d: %s\nwant it to contain %s", i, lines[i], want)
		}
	}
	out.Reset()
	r.Flush(slog.New(slog.NewTextHandler(&out, nil)))
	if out.Len() != 0 {
		t.Errorf("a second flush wrote again: %s", out.String())
	}
}

func TestRefusalsUnbounded(t *testing.T) {
	r := NewRefusals(0)
	for range 100 {
		if !r.Admit(apierr.RateLimited, "orders", 429, time.Now()) {
			t.Fatal("a line held back with no bound")
		}
	}
}

func TestCodeInEnvelope(t *testing.T) {
	for body, want := range map[string]apierr.Code{
		`{"error":{"code":"not_found","message":"no such order"}}`: "not_found",
		`{"error":{"message":"x"}}`:                                "",
		`{"error":{"code":"` + strings.Repeat("x", 65) + `"}}`:     "",
		`{"error":{"code":"unterminated`:                           "",
	} {
		if got := codeInEnvelope([]byte(body)); got != want {
			t.Errorf("%s: %q, want %q", body, got, want)
		}
	}
}
