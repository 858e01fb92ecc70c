package view

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"vendorgate/gateway/usage"
)

// render writes v with fn into a table and returns the text.
func render[T any](t *testing.T, fn func(*Table, T), v T) string {
	t.Helper()
	var buf bytes.Buffer
	tb := NewTable(&buf)
	fn(tb, v)
	if err := tb.Flush(); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

func TestVendorsTableAligned(t *testing.T) {
	out := render(t, WriteVendors, []Vendor{
		{VendorID: "v-1", CompanyName: "Acme", Environment: "sandbox", Status: "approved",
			EnabledServices: []string{"mvr", "psp"}, CreatedAt: "2026-11-23T11:12:21.123456789Z"},
		{VendorID: "v-2", CompanyName: "Much Longer Company Name", Environment: "live", Status: "pending",
			CreatedAt: "2026-11-23T12:00:00+02:00"},
	})
	want := strings.Join([]string{
		"VENDOR ID  COMPANY                   ENVIRONMENT  STATUS    SERVICES  CREATED",
		"v-1        Acme                      sandbox      approved  mvr,psp   2026-11-23 11:12:21Z",
		"v-2        Much Longer Company Name  live         pending   none      2026-11-23 10:00:00Z",
		"",
	}, "\n")
	if out != want {
		t.Fatalf("table:\n%s\nwant:\n%s", out, want)
	}
	if got := render(t, WriteVendors, nil); got != "No vendors.\n" {
		t.Fatalf("empty list: %q", got)
	}
}

func TestCellsCannotBreakTheTable(t *testing.T) {
	out := render(t, WriteVendor, Vendor{VendorID: "v", CompanyName: "Evil\tCo\n\x1b[2Jcleared", CreatedAt: "not a time"})
	if strings.ContainsAny(out, "\t\x1b") {
		t.Fatalf("control characters reached the output: %q", out)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 6 {
		t.Fatalf("%d lines, want 6 (one per field):\n%s", len(lines), out)
	}
	for _, want := range []string{"COMPANY      Evil Co  [2Jcleared", "ENVIRONMENT  -", "SERVICES     none", "CREATED      not a time"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("missing line %q in:\n%s", want, out)
		}
	}
}

func TestIssuedKeyShownProminently(t *testing.T) {
	out := render(t, WriteIssuedKey, IssuedKey{Key: "vgsandbx_SECRETSECRET", KeyID: "k-1", VendorID: "v-1",
		CreatedAt: "2026-11-23T11:00:00Z", ExpiresAt: "2027-02-21T11:00:00Z"})
	lines := strings.Split(out, "\n")
	if !strings.Contains(lines[0], "shown only once") || lines[2] != "    vgsandbx_SECRETSECRET" {
		t.Fatalf("key not shown on its own line under the once-only warning:\n%s", out)
	}
	if !strings.Contains(out, "EXPIRES    2027-02-21 11:00:00Z\n") {
		t.Fatalf("no expiry line:\n%s", out)
	}
}

func TestKeysTableStates(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	revoked, revokeAt, newID, oldID := "2026-11-23T11:30:00Z", "2026-11-24T11:00:00Z", "k-new", "k-rotating"
	out := render(t, func(tb *Table, ks []Key) { WriteKeys(tb, ks, now) }, []Key{
		{KeyID: "k-active", Prefix: "vgsandbx", CreatedAt: "2026-11-23T11:00:00Z", ExpiresAt: "2027-02-21T11:00:00Z"},
		{KeyID: "k-expired", Prefix: "vgsandbx", CreatedAt: "2026-11-23T11:00:00Z", ExpiresAt: "2026-11-23T11:00:02Z"},
		{KeyID: "k-revoked", Prefix: "vglive01", CreatedAt: "2026-11-23T11:00:00Z", ExpiresAt: "2027-02-21T11:00:00Z", RevokedAt: &revoked},
		{KeyID: oldID, Prefix: "vglive01", CreatedAt: "2026-11-23T11:00:00Z", ExpiresAt: "2027-02-21T11:00:00Z", ReplacedBy: &newID, RevokeAt: &revokeAt},
		{KeyID: newID, Prefix: "vglive01", CreatedAt: "2026-11-23T11:00:00Z", ExpiresAt: "2027-02-21T11:00:00Z", RotatedFrom: &oldID},
	})
	for _, want := range []string{
		"KEY ID      PREFIX    STATE     LEFT    CREATED               EXPIRES               REVOKED               ROTATION",
		"k-active    vgsandbx  active    89d23h  2026-11-23 11:00:00Z  2027-02-21 11:00:00Z  -                     -",
		"k-expired   vgsandbx  expired   -       2026-11-23 11:00:00Z  2026-11-23 11:00:02Z  -                     -",
		"k-revoked   vglive01  revoked   -       2026-11-23 11:00:00Z  2027-02-21 11:00:00Z  2026-11-23 11:30:00Z  -",
		"k-rotating  vglive01  rotating  23h0m   2026-11-23 11:00:00Z  2027-02-21 11:00:00Z  -                     replaced by k-new",
		"k-new       vglive01  active    89d23h  2026-11-23 11:00:00Z  2027-02-21 11:00:00Z  -                     replaces k-rotating",
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("missing line %q in:\n%s", want, out)
		}
	}
	// Past its revoke_at a rotated key is revoked, whether or not the
	// backend has revoked it yet.
	if s := KeyState(Key{ExpiresAt: "2027-02-21T11:00:00Z", RevokeAt: &revokeAt}, now.Add(24*time.Hour)); s != "revoked" {
		t.Errorf("a key past its revoke_at is %s, want revoked", s)
	}
}

func TestOrderTable(t *testing.T) {
	var a Order
	body := `{"vendor_id":"v-1","order":{"order_id":"o-1","status":"under_review","final":false,
		"safety_score":{"score":82,"grade":"B","risk_level":"low","reports_used":["mvr","psp"],"calculated_at":"2026-11-23T11:00:05Z"},
		"environment":"sandbox","mc_number":"MC123456","external_reference":null,"created_at":"2026-11-23T11:00:00Z",
		"poll":{"url":"http://x/api/vendor/v1/orders/o-1","after_seconds":5},
		"services":[
		 {"service":"mvr","status":"under_review","reason":"manual_review","state":"TX","completed_at":null,"file_url":null,"result":null},
		 {"service":"psp","status":"completed","reason":null,"state":null,"completed_at":"2026-11-23T11:00:03Z","file_url":"http://x/r/psp","result":null},
		 {"service":"driver_reviews","status":"completed","reason":null,"state":null,"completed_at":"2026-11-23T11:00:04Z","file_url":null,
		  "result":{"found":true,"reviews":[{"rating":4,"text":"ok","date":"2026-01-02"},{"rating":null,"text":null,"date":null}]}}]}}`
	if err := json.Unmarshal([]byte(body), &a); err != nil {
		t.Fatal(err)
	}
	out := render(t, WriteOrder, a)
	for _, want := range []string{
		"ORDER ID      o-1",
		"VENDOR ID     v-1",
		"STATUS        under_review",
		"FINAL         false",
		"EXTERNAL REF  -",
		"SAFETY SCORE  82 (grade B, risk low, from mvr,psp)",
		"SERVICE         STATUS        REASON         STATE  COMPLETED             REPORT / RESULT",
		"mvr             under_review  manual_review  TX     -                     -",
		"psp             completed     -              -      2026-11-23 11:00:03Z  http://x/r/psp",
		"driver_reviews  completed     -              -      2026-11-23 11:00:04Z  2 reviews",
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("missing line %q in:\n%s", want, out)
		}
	}
}

func TestWriteJSONIndentsAndKeepsUnknownFields(t *testing.T) {
	var buf bytes.Buffer
	if err := JSON(&buf, json.RawMessage(`{"vendor_id":"v","later_field":[1,2]}`)); err != nil {
		t.Fatal(err)
	}
	want := "{\n  \"vendor_id\": \"v\",\n  \"later_field\": [\n    1,\n    2\n  ]\n}\n"
	if buf.String() != want {
		t.Fatalf("got %q want %q", buf.String(), want)
	}
	if err := JSON(&buf, json.RawMessage(`{oops`)); err == nil {
		t.Fatal("invalid JSON printed without error")
	}
}

func TestSparkline(t *testing.T) {
	minute := func(a, l, s uint64) UsageBucket {
		return UsageBucket{Seconds: 60, Allowed: a, Limited: l, ShadowLimited: s}
	}
	bs := []UsageBucket{
		{Seconds: 3600, Allowed: 5000}, // hours are not drawn
		minute(0, 0, 0), minute(60, 0, 0), minute(120, 0, 0), minute(120, 30, 0), minute(10, 0, 4),
	}
	spark, marks := Sparkline(bs, 120, 60)
	if spark != " ▅██▂" || marks != "   xs" {
		t.Fatalf("spark %q marks %q", spark, marks)
	}
	if s, _ := Sparkline(bs, 0, 0); s != " ████" {
		t.Fatalf("no quota: %q", s)
	}
}

// TestVendorUsageHasNoStrayDashes: usage show's blank lines and continued
// rows are blank, not "-" cells.
func TestVendorUsageHasNoStrayDashes(t *testing.T) {
	var buf bytes.Buffer
	tb := NewTable(&buf)
	u := VendorUsage{CompanyName: "Acme"}
	u.VendorID, u.Window = "548ed114-29cf-4dac-8f98-339783ffb823", "1h"
	at := time.Date(2026, 3, 14, 15, 0, 0, 0, time.UTC)
	for _, name := range []string{"reads", "orders"} {
		u.Policies = append(u.Policies, usage.PolicyUsage{Limit: name, Quota: 120, PeriodSeconds: 60,
			Minutes: []usage.Bucket{{At: at, Seconds: 60, Allowed: 100, Limited: 30}}})
	}
	WriteVendorUsage(tb, u)
	tb.Flush()
	out := buf.String()
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == "-" {
			t.Errorf("stray dash line %q in:\n%s", l, out)
		}
	}
	if !strings.Contains(out, "allowed 100, limited 30") || !strings.Contains(out, "reads") || !strings.Contains(out, "orders") {
		t.Errorf("usage show lost its content:\n%s", out)
	}
	// The sparkline says its time span and its scale.
	if !strings.Contains(out, "minutes     15:00 to 15:01 UTC, 1 minute, one character each") ||
		!strings.Contains(out, "scale       █ 120 requests a minute (the quota's rate) or more") ||
		!strings.Contains(out, "x: refused") {
		t.Errorf("usage show's sparkline does not say its span and scale:\n%s", out)
	}
}

// TestUsageTopSaysPeakIsDemand: usage top's PEAK/MIN counts refused
// requests too, and the table says so.
func TestUsageTopSaysPeakIsDemand(t *testing.T) {
	var buf bytes.Buffer
	tb := NewTable(&buf)
	u := UsageTop{Window: "1h", Vendors: []UsageRow{{TopRow: usage.TopRow{VendorID: "v-1", Limit: "reads", Quota: 120,
		PeriodSeconds: 60, Allowed: 120, Limited: 80, PeakPerMinute: 200}, CompanyName: "Acme"}}}
	WriteUsageTop(tb, u)
	tb.Flush()
	if out := buf.String(); !strings.Contains(out, "PEAK/MIN is the busiest minute's demand: its requests allowed and refused alike.") {
		t.Errorf("usage top does not say what PEAK/MIN counts:\n%s", out)
	}
}

// TestUnpublishedChangeSaysWhenAndWhatToDo: a change the backend could not
// publish is never shown as applied at once; the table gives the deadlines
// (key_cache.ttl for a gateway that lost Redis too, key_cache.pushed_ttl
// for one that did not) and says to repeat the command.
func TestUnpublishedChangeSaysWhenAndWhatToDo(t *testing.T) {
	now := time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC)
	key := Key{KeyID: "k-1", VendorID: "v-1", Prefix: "vgsandbx", CreatedAt: "2026-11-23T11:00:00Z", ExpiresAt: "2027-02-21T11:00:00Z"}
	revoke := func(a Announcement) string {
		return render(t, func(tb *Table, k RevokedKey) { WriteRevokedKey(tb, k, now) }, RevokedKey{Key: key, Announcement: a})
	}
	out := revoke(Announcement{Invalidation: "publish_failed"})
	for _, want := range []string{"could not publish", "key_cache.ttl (30s by default: by 03:00:30Z)",
		"key_cache.pushed_ttl (15m by default: by 03:15:00Z)", "Run `vendorctl key revoke k-1` again"} {
		if !strings.Contains(out, want) {
			t.Errorf("revoke not published lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "refuses this key now") {
		t.Errorf("revoke not published says the key is refused now:\n%s", out)
	}
	if out := revoke(Announcement{Published: true, Invalidation: "redis"}); !strings.Contains(out, "refuses this key now") {
		t.Errorf("published revoke:\n%s", out)
	}

	vendor := Vendor{VendorID: "v-1", CompanyName: "Acme", Environment: "sandbox", Status: "suspended", CreatedAt: "2026-11-23T11:00:00Z"}
	change := func(a Announcement) string {
		return render(t, func(tb *Table, v VendorChange) { WriteVendorChange(tb, v, now) }, VendorChange{Vendor: vendor, Announcement: a})
	}
	out = change(Announcement{Invalidation: "publish_failed"})
	if !strings.Contains(out, "could not publish this change") || !strings.Contains(out, "key_cache.pushed_ttl") || !strings.Contains(out, "Repeat the command") {
		t.Errorf("vendor change not published:\n%s", out)
	}
	if out := change(Announcement{Published: true, Invalidation: "redis"}); strings.Contains(out, "publish") {
		t.Errorf("a published vendor change has a note:\n%s", out)
	}
}
