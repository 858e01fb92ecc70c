package logtext

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"
)

const testKey = "vglive01_Q2xhdWRlIHdhcyBoZXJlIGFuZCBsZWZ0IGEga2V5IGJlaGluZA0"

// Header removes a key wherever it stands, bounds the value with a marker
// naming its length, cuts at a character boundary, and keeps a clean
// value as it is.
func TestHeader(t *testing.T) {
	long := strings.Repeat("a", 7000)
	for _, c := range []struct{ in, want string }{
		{"curl/8.4.0", "curl/8.4.0"},
		{testKey, Redacted},
		{"client/1.0 (" + testKey + ")", "client/1.0 (" + Redacted + ")"},
		{testKey + " " + testKey, Redacted + " " + Redacted},
		{long, strings.Repeat("a", MaxHeader) + "...[truncated: 7000 bytes]"},
		{strings.Repeat("a", MaxHeader-1) + "é" + "x", strings.Repeat("a", MaxHeader-1) + "...[truncated: 258 bytes]"},
		{strings.Repeat("b", MaxHeader-10) + testKey + " " + strings.Repeat("c", 20),
			strings.Repeat("b", MaxHeader-10) + Redacted + "...[truncated: " + strconv.Itoa(MaxHeader-10+len(testKey)+21) + " bytes]"},
	} {
		if got := Header([]byte(c.in)); got != c.want {
			t.Errorf("Header(%.40q...) = %q, want %q", c.in, got, c.want)
		}
	}
	// A key across the bound is removed before the cut: no part of it stays.
	v := strings.Repeat("b", MaxHeader-20) + testKey
	if got := Header([]byte(v)); strings.Contains(got, testKey[:20]) || strings.Contains(got, testKey[9:29]) {
		t.Errorf("Header kept part of a key: %q", got)
	}
}

// Escape writes C1 controls, DEL and bidi controls as \uXXXX text and
// leaves everything else, other non-ASCII text included, as it is.
func TestEscape(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"plain", "plain"},
		{"héllo wörld 日本", "héllo wörld 日本"},
		{"a\u009b31mred", `a\u009b31mred`},
		{"\u0080\u0085\u009f", `\u0080\u0085\u009f`},
		{"x\x7fy", `x\u007fy`},
		{"evil\u202egnp.exe", `evil\u202egnp.exe`},
		{"\u202a\u202b\u202c\u202d\u2066\u2067\u2068\u2069", `\u202a\u202b\u202c\u202d\u2066\u2067\u2068\u2069`},
		{"\u200e\u200f\u061c", `\u200e\u200f\u061c`},
	} {
		if got := Escape(c.in); got != c.want {
			t.Errorf("Escape(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// Through the handler, a JSON line holds none of those characters raw,
// in the message, a string, a group or an error, nor once decoded.
func TestHandlerEscapes(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(NewHandler(slog.NewJSONHandler(&buf, nil))).With("with", "w\u009b")
	log.Info("msg\u202e", "ua", "a\u009b[2Jb", slog.Group("g", "x", "\u2066y"), "err", errors.New("bad \u0085 thing"),
		"n", 3)
	line := buf.String()
	for _, raw := range []string{"\u009b", "\u202e", "\u2066", "\u0085"} {
		if strings.Contains(line, raw) {
			t.Fatalf("raw %q in %s", raw, line)
		}
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatal(err)
	}
	if m["ua"] != `a\u009b[2Jb` || m["msg"] != `msg\u202e` || m["err"] != `bad \u0085 thing` || m["with"] != `w\u009b` ||
		m["g"].(map[string]any)["x"] != `\u2066y` || m["n"] != 3.0 {
		t.Fatalf("decoded %v", m)
	}
}

// A clean record passes through without an allocation of the handler's.
func TestHandlerCleanRecordAllocs(t *testing.T) {
	h := NewHandler(discard{})
	r := slog.NewRecord(testTime, slog.LevelInfo, "request", 0)
	r.AddAttrs(slog.String("request_id", "gw-1f"), slog.String("user_agent", "Mozilla/5.0 (X11; Linux x86_64) Firefox/120.0"),
		slog.Int("status", 200), slog.String("vendor_id", "vendor-a"))
	if n := testing.AllocsPerRun(100, func() { _ = h.Handle(context.Background(), r) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

func BenchmarkHeaderClean(b *testing.B) {
	ua := []byte("Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0")
	b.ReportAllocs()
	for b.Loop() {
		_ = Header(ua)
	}
}

var testTime = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

type discard struct{}

func (discard) Enabled(context.Context, slog.Level) bool  { return true }
func (discard) Handle(context.Context, slog.Record) error { return nil }
func (d discard) WithAttrs([]slog.Attr) slog.Handler      { return d }
func (d discard) WithGroup(string) slog.Handler           { return d }

// BenchmarkHandlerClean is the escaping handler's scan of an access log
// line with nothing to escape (what every line pays).
func BenchmarkHandlerClean(b *testing.B) {
	h := NewHandler(discard{})
	r := slog.NewRecord(testTime, slog.LevelInfo, "request", 0)
	r.AddAttrs(slog.String("request_id", "3f2504e0-4f89-11d3-9a0c-0305e82c3301"), slog.String("route", "/api/vendor/v1/orders/{order_id}"),
		slog.String("method", "GET"), slog.Int("status", 200), slog.Duration("duration", 1000), slog.String("limit", "allowed"),
		slog.Int("bytes_in", 0), slog.Int("bytes_out", 352), slog.String("vendor_id", "ven_01HF8Z3Q4R5S6T7U8V9W0XYZAB"),
		slog.String("key_id", "key_01HF8Z3Q4R5S6T7U8V9W0XYZAB"), slog.String("client", "203.0.113.7"),
		slog.String("trace_id", "4bf92f3577b34da6a3ce929d0e0e4736"),
		slog.String("user_agent", "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0"))
	b.ReportAllocs()
	for b.Loop() {
		_ = h.Handle(context.Background(), r)
	}
}

// firstUnsafe finds a character to escape at any position, in the
// word-at-a-time part, the overlapping last word and the short tail alike.
func TestFirstUnsafeEveryPosition(t *testing.T) {
	for n := 0; n < 40; n++ {
		for at := 0; at < n; at++ {
			for _, r := range []string{"\x7f", "\u009b", "\u202e"} {
				s := strings.Repeat("a", at) + r + strings.Repeat("b", n-at-1)
				if got := firstUnsafe(s); got != at {
					t.Fatalf("firstUnsafe(%q) = %d, want %d", s, got, at)
				}
			}
			if s := strings.Repeat("a", at) + "é" + strings.Repeat("b", n-at-1); firstUnsafe(s) != -1 {
				t.Fatalf("firstUnsafe(%q) found a character to escape", s)
			}
		}
		if firstUnsafe(strings.Repeat("z", n)) != -1 {
			t.Fatalf("firstUnsafe of %d clean bytes found one", n)
		}
	}
}
