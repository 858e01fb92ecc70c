// Package view is how vendorctl shows the admin API's objects: aligned
// text tables for people, indented JSON for scripts. Cells are cleaned of
// control characters, so a hostile company name cannot break a table or
// drive the operator's terminal.
package view

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"vendorgate/config"
	"vendorgate/shared/wire"
)

// Vendor is the admin API's vendor object. Times stay strings so that
// a table shows whatever the backend sent even if it is not RFC 3339.
type Vendor struct {
	VendorID        string   `json:"vendor_id"`
	CompanyName     string   `json:"company_name"`
	Environment     string   `json:"environment"`
	Status          string   `json:"status"`
	EnabledServices []string `json:"enabled_services"`
	CreatedAt       string   `json:"created_at"`
}

// Key is the admin API's key object: never the secret. A rotation pairs
// two keys: RotatedFrom on the new one, ReplacedBy and RevokeAt (the end of
// the overlap) on the old one.
type Key struct {
	KeyID       string  `json:"key_id"`
	VendorID    string  `json:"vendor_id"`
	Prefix      string  `json:"prefix"`
	CreatedAt   string  `json:"created_at"`
	ExpiresAt   string  `json:"expires_at"`
	RevokedAt   *string `json:"revoked_at"`
	RotatedFrom *string `json:"rotated_from"`
	ReplacedBy  *string `json:"replaced_by"`
	RevokeAt    *string `json:"revoke_at"`
}

// IssuedKey is the answer of key issue, the one time the key is shown.
type IssuedKey struct {
	Key       string `json:"key"`
	KeyID     string `json:"key_id"`
	VendorID  string `json:"vendor_id"`
	CreatedAt string `json:"created_at"`
	ExpiresAt string `json:"expires_at"`
}

// Order is every order command's answer.
type Order struct {
	VendorID string     `json:"vendor_id"`
	Order    wire.Order `json:"order"`
}

// JSON prints raw indented by two spaces, with a final newline.
func JSON(w io.Writer, raw json.RawMessage) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return fmt.Errorf("read the backend's answer: %w", err)
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}

// Table is an aligned text table: columns two spaces apart, written when
// Flush is called (text/tabwriter).
type Table struct {
	tw *tabwriter.Writer
}

// NewTable returns a table writing to w.
func NewTable(w io.Writer) *Table {
	return &Table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
}

// Row writes one line of cells. Each cell is cleaned of tabs, newlines and
// other control characters, which would break the alignment or, from a
// hostile company name, drive the operator's terminal.
func (t *Table) Row(cells ...string) {
	t.write(cell, cells)
}

// Line writes cells as Row does, except that an empty cell stays blank
// rather than "-": for a continued row under the one it belongs to.
func (t *Table) Line(cells ...string) {
	t.write(clean, cells)
}

func (t *Table) write(show func(string) string, cells []string) {
	for i, c := range cells {
		if i > 0 {
			io.WriteString(t.tw, "\t")
		}
		io.WriteString(t.tw, show(c))
	}
	io.WriteString(t.tw, "\n")
}

// Note writes a line outside the columns.
func (t *Table) Note(s string) {
	io.WriteString(t.tw, clean(s)+"\n")
}

// Flush writes the table out.
func (t *Table) Flush() error { return t.tw.Flush() }

// cell is s cleaned, or "-" when empty.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return clean(s)
}

func clean(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
}

// when shows an RFC 3339 time to the second in UTC; anything else as sent.
func when(s string) string {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return s
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

func whenPtr(t *time.Time) string {
	if t == nil {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func services(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ",")
}

// WriteVendor shows one vendor, a field per line.
func WriteVendor(t *Table, v Vendor) {
	t.Row("VENDOR ID", v.VendorID)
	t.Row("COMPANY", v.CompanyName)
	t.Row("ENVIRONMENT", v.Environment)
	t.Row("STATUS", v.Status)
	t.Row("SERVICES", services(v.EnabledServices))
	t.Row("CREATED", when(v.CreatedAt))
}

// WriteVendors shows vendors a row each under a header.
func WriteVendors(t *Table, vs []Vendor) {
	if len(vs) == 0 {
		t.Note("No vendors.")
		return
	}
	t.Row("VENDOR ID", "COMPANY", "ENVIRONMENT", "STATUS", "SERVICES", "CREATED")
	for _, v := range vs {
		t.Row(v.VendorID, v.CompanyName, v.Environment, v.Status, services(v.EnabledServices), when(v.CreatedAt))
	}
}

// WriteIssuedKey shows a new key alone on its line, under a warning that
// it is shown only once, so that it is copied before the screen scrolls.
func WriteIssuedKey(t *Table, k IssuedKey) {
	t.Note("API key (shown only once: it cannot be shown again, store it now):")
	t.Note("")
	t.Note("    " + k.Key)
	t.Note("")
	t.Row("KEY ID", k.KeyID)
	t.Row("VENDOR ID", k.VendorID)
	t.Row("CREATED", when(k.CreatedAt))
	t.Row("EXPIRES", when(k.ExpiresAt))
}

// KeyState says whether a key works now: revoked, expired, active, or
// rotating (it works until its rotation overlap ends).
func KeyState(k Key, now time.Time) string {
	if k.RevokedAt != nil {
		return "revoked"
	}
	if at, ok := parseTime(k.RevokeAt); ok && !now.Before(at) {
		return "revoked"
	}
	if exp, err := time.Parse(time.RFC3339Nano, k.ExpiresAt); err == nil && !now.Before(exp) {
		return "expired"
	}
	if k.RevokeAt != nil {
		return "rotating"
	}
	return "active"
}

func parseTime(s *string) (time.Time, bool) {
	if s == nil {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, *s)
	return t, err == nil
}

// KeyLeft is how long a key works from now: until the end of its rotation
// overlap or its expiry, whichever comes first; "-" for a key that no
// longer works.
func KeyLeft(k Key, now time.Time) string {
	if KeyState(k, now) == "revoked" || KeyState(k, now) == "expired" {
		return "-"
	}
	end, ok := parseTime(&k.ExpiresAt)
	if !ok {
		return "?"
	}
	if at, ok := parseTime(k.RevokeAt); ok && at.Before(end) {
		end = at
	}
	return Span(end.Sub(now))
}

// KeyPair names the other key of a rotation: "replaced by ID" on the old
// key, "replaces ID" on the new one; "-" for a key never rotated.
func KeyPair(k Key) string {
	switch {
	case k.ReplacedBy != nil:
		return "replaced by " + *k.ReplacedBy
	case k.RotatedFrom != nil:
		return "replaces " + *k.RotatedFrom
	}
	return "-"
}

// WriteKey shows one key, a field per line, with its state at now.
func WriteKey(t *Table, k Key, now time.Time) {
	t.Row("KEY ID", k.KeyID)
	t.Row("VENDOR ID", k.VendorID)
	t.Row("PREFIX", k.Prefix)
	t.Row("STATE", KeyState(k, now))
	t.Row("CREATED", when(k.CreatedAt))
	t.Row("EXPIRES", when(k.ExpiresAt))
	t.Row("REVOKED", when(str(k.RevokedAt)))
	if k.RevokeAt != nil || k.RotatedFrom != nil {
		t.Row("ROTATION", KeyPair(k))
		t.Row("LEFT", KeyLeft(k, now))
	}
}

// Announcement is what the answer of an action the gateways cache (key
// revoke, vendor approve, suspend, reinstate, services) says of its
// announcement: Published when the backend published it through Redis;
// Invalidation "redis" (published: every gateway applies it at once),
// "cache_ttl" (the backend has no Redis: when their cached entries expire)
// or "publish_failed" (the backend has a Redis but could not publish).
type Announcement struct {
	Published    bool   `json:"published"`
	Invalidation string `json:"invalidation"`
}

// RevokedKey is the answer of key revoke: the key and its announcement.
type RevokedKey struct {
	Key
	Announcement
}

// VendorChange is the answer of a vendor action: the vendor and the
// announcement of the change.
type VendorChange struct {
	Vendor
	Announcement
}

// WriteRevokedKey shows a revoked key and when every gateway refuses it;
// when the revocation was not published, how to publish it again.
func WriteRevokedKey(t *Table, k RevokedKey, now time.Time) {
	WriteKey(t, k.Key, now)
	switch k.Invalidation {
	case "redis":
		t.Note("")
		t.Note("Every gateway refuses this key now: the backend published the revocation through Redis.")
	case "cache_ttl":
		t.Note("")
		ttl := config.DefaultGateway().KeyCache.TTL // the gateways' unless configured
		t.Note("Gateways refuse this key within each gateway's key_cache.ttl (" + Span(ttl) + " by default: by " +
			now.Add(ttl).UTC().Format("15:04:05Z") + "); until then one that cached it still serves it.")
		t.Note("The backend has no Redis to publish revocations on: set its redis_url (BACKEND_REDIS_URL) to the gateways' Redis to make it immediate.")
	case "publish_failed":
		t.Note("")
		t.Note("The backend could not publish the revocation through Redis (its log: \"invalidation not published\"): a gateway that cached this key may still serve it.")
		writeUnpublished(t, now, "this key")
		t.Note("Run `vendorctl key revoke " + clean(k.KeyID) + "` again once the backend reaches Redis: it publishes the revocation again.")
	}
}

// WriteVendorChange shows a vendor after an action and, when the change
// was not published, when the gateways apply it and how to publish it.
func WriteVendorChange(t *Table, v VendorChange, now time.Time) {
	WriteVendor(t, v.Vendor)
	if v.Invalidation != "publish_failed" {
		return
	}
	t.Note("")
	t.Note("The backend could not publish this change through Redis (its log: \"invalidation not published\"): a gateway that cached this vendor's keys may still apply the old state.")
	writeUnpublished(t, now, "the change")
	t.Note("Repeat the command once the backend reaches Redis: it publishes the change again.")
}

// writeUnpublished says when gateways apply what was not published.
func writeUnpublished(t *Table, now time.Time, what string) {
	d := config.DefaultGateway().KeyCache // the gateways' unless configured
	t.Note("A gateway that lost Redis too applies " + what + " once it is subscribed again, and within its key_cache.ttl (" + Span(d.TTL) + " by default: by " +
		now.Add(d.TTL).UTC().Format("15:04:05Z") + ") at the latest; one whose subscription held applies it when its cached entry expires, within its key_cache.pushed_ttl (" +
		Span(d.PushedTTL) + " by default: by " + now.Add(d.PushedTTL).UTC().Format("15:04:05Z") + ").")
}

// WriteKeys shows keys a row each, with their state at now.
func WriteKeys(t *Table, ks []Key, now time.Time) {
	if len(ks) == 0 {
		t.Note("No keys.")
		return
	}
	t.Row("KEY ID", "PREFIX", "STATE", "LEFT", "CREATED", "EXPIRES", "REVOKED", "ROTATION")
	for _, k := range ks {
		t.Row(k.KeyID, k.Prefix, KeyState(k, now), KeyLeft(k, now), when(k.CreatedAt), when(k.ExpiresAt), when(str(k.RevokedAt)), KeyPair(k))
	}
}

// WriteExpiringKeys shows every vendor's keys that expire soon, a row each
// with its vendor and the time it has left, soonest first.
func WriteExpiringKeys(t *Table, ks []Key, now time.Time) {
	if len(ks) == 0 {
		t.Note("No key expires within that span.")
		return
	}
	t.Row("VENDOR ID", "KEY ID", "PREFIX", "STATE", "LEFT", "EXPIRES", "ROTATION")
	for _, k := range ks {
		t.Row(k.VendorID, k.KeyID, k.Prefix, KeyState(k, now), KeyLeft(k, now), when(k.ExpiresAt), KeyPair(k))
	}
}

// publishNote says what the revocation's publish adds.
func publishNote(invalidation string) string {
	switch invalidation {
	case "redis":
		return " from the rotation's publish through Redis, and the revocation is published at that time too"
	case "publish_failed":
		return " when its cached entry is refreshed: the backend could not publish the rotation through Redis (its log: \"invalidation not published\"), so that is within key_cache.ttl (30s by default) for a gateway that lost Redis too and within key_cache.pushed_ttl (15m by default) for one whose subscription held"
	}
	return " when its cached entry expires (key_cache.ttl, 30s by default): the backend has no Redis to publish on"
}

// RotatedKey is the answer of key rotate: the new key (shown only once),
// the old key as it is now, and how the gateways learn of its revocation.
type RotatedKey struct {
	IssuedKey
	RotatedFrom string `json:"rotated_from"`
	OldKey      Key    `json:"old_key"`
	Announcement
}

// WriteRotatedKey shows the new key as key issue does, then when the old
// key stops working and how soon every gateway refuses it.
func WriteRotatedKey(t *Table, k RotatedKey, now time.Time) {
	WriteIssuedKey(t, k.IssuedKey)
	t.Row("REPLACES", k.RotatedFrom)
	t.Note("")
	if k.OldKey.RevokedAt != nil {
		t.Note("The old key " + k.RotatedFrom + " is revoked now (no overlap).")
		WriteRevokedKey(t, RevokedKey{Key: k.OldKey, Announcement: k.Announcement}, now)
		return
	}
	at, ok := parseTime(k.OldKey.RevokeAt)
	if !ok {
		t.Note("The old key " + k.RotatedFrom + " has no revocation scheduled: revoke it with vendorctl key revoke " + k.RotatedFrom)
		return
	}
	t.Note("Both keys work until " + at.UTC().Format(time.RFC3339) + " (in " + Span(at.Sub(now)) + "); then the old key " +
		k.RotatedFrom + " is revoked and answers 401 invalid_api_key.")
	t.Note("Every gateway refuses it at that time by itself (its key lookup carries revoke_at); a gateway that cached the key before the rotation learns revoke_at" + publishNote(k.Invalidation) + ".")
}

// WriteOrder shows an order's fields, then its services a row each.
func WriteOrder(t *Table, a Order) {
	o := a.Order
	t.Row("ORDER ID", o.OrderID)
	t.Row("VENDOR ID", a.VendorID)
	t.Row("STATUS", o.Status)
	t.Row("FINAL", strconv.FormatBool(o.Final))
	t.Row("ENVIRONMENT", o.Environment)
	t.Row("MC NUMBER", o.MCNumber)
	t.Row("EXTERNAL REF", str(o.ExternalReference))
	t.Row("CREATED", o.CreatedAt.UTC().Format("2006-01-02 15:04:05Z"))
	t.Row("SAFETY SCORE", safetyScore(o.SafetyScore))
	t.Note("")
	t.Row("SERVICE", "STATUS", "REASON", "STATE", "COMPLETED", "REPORT / RESULT")
	for _, s := range o.Services {
		t.Row(s.Service, s.Status, str(s.Reason), str(s.State), whenPtr(s.CompletedAt), outcome(s))
	}
}

func safetyScore(s *wire.SafetyScore) string {
	if s == nil {
		return ""
	}
	out := strconv.Itoa(s.Score)
	var parts []string
	if s.Grade != nil {
		parts = append(parts, "grade "+*s.Grade)
	}
	if s.RiskLevel != nil {
		parts = append(parts, "risk "+*s.RiskLevel)
	}
	if len(s.ReportsUsed) > 0 {
		parts = append(parts, "from "+strings.Join(s.ReportsUsed, ","))
	}
	if len(parts) > 0 {
		out += " (" + strings.Join(parts, ", ") + ")"
	}
	return out
}

// outcome is a service's deliverable: the report address, or a summary of
// the driver_reviews result.
func outcome(s wire.ServiceEntry) string {
	switch {
	case s.FileURL != nil:
		return *s.FileURL
	case s.Result == nil:
		return ""
	case !s.Result.Found:
		return "no reviews found"
	case len(s.Result.Reviews) == 1:
		return "1 review"
	}
	return strconv.Itoa(len(s.Result.Reviews)) + " reviews"
}

// QueueEntry is one order of `order list`: whose it is, when its deadline
// closes it, and the order.
type QueueEntry struct {
	VendorID   string     `json:"vendor_id"`
	DeadlineAt time.Time  `json:"deadline_at"`
	Order      wire.Order `json:"order"`
}

// OrderQueue is the answer of `order list`.
type OrderQueue struct {
	Orders     []QueueEntry `json:"orders"`
	NextCursor *string      `json:"next_cursor"`
}

// WriteOrderQueue shows orders a row each at now, each vendor's company
// beside its id (companies by vendor id): for a held order which
// service is held and why, how long since it was placed, and how long
// until its deadline closes it (nothing once the order is final).
func WriteOrderQueue(t *Table, q OrderQueue, companies map[string]string, now time.Time) {
	if len(q.Orders) == 0 {
		t.Note("No orders.")
		return
	}
	t.Row("ORDER ID", "VENDOR ID", "COMPANY", "STATUS", "HELD", "PLACED", "DEADLINE IN")
	for _, e := range q.Orders {
		o := e.Order
		var held []string
		for _, s := range o.Services {
			if s.Status == wire.StatusUnderReview {
				held = append(held, s.Service+" "+str(s.Reason))
			}
		}
		deadline := ""
		switch {
		case o.Final:
		case !now.Before(e.DeadlineAt):
			deadline = "due now"
		default:
			deadline = Span(e.DeadlineAt.Sub(now))
		}
		t.Row(o.OrderID, e.VendorID, Clip(companies[e.VendorID], 24), o.Status, strings.Join(held, ", "), Span(now.Sub(o.CreatedAt))+" ago", deadline)
	}
}

// Clip is s cut to at most n characters, "…" marking a cut.
func Clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// Span is d to the minute for people: 2d3h, 47h59m reads as 1d23h, 5m;
// under a minute, seconds.
func Span(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	if d < time.Minute {
		return strconv.Itoa(int(d/time.Second)) + "s"
	}
	d = d.Truncate(time.Minute)
	days, hours, mins := int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour), int(d%time.Hour/time.Minute)
	switch {
	case days > 0:
		return strconv.Itoa(days) + "d" + strconv.Itoa(hours) + "h"
	case hours > 0:
		return strconv.Itoa(hours) + "h" + strconv.Itoa(mins) + "m"
	}
	return strconv.Itoa(mins) + "m"
}
