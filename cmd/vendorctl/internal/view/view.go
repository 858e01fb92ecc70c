package main

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

	"vendorgate/shared/wire"
)

// adminVendor is the admin API's vendor object. Times stay strings so that
// a table shows whatever the backend sent even if it is not RFC 3339.
type adminVendor struct {
	VendorID        string   `json:"vendor_id"`
	CompanyName     string   `json:"company_name"`
	Environment     string   `json:"environment"`
	Status          string   `json:"status"`
	EnabledServices []string `json:"enabled_services"`
	CreatedAt       string   `json:"created_at"`
}

// adminKey is the admin API's key object: never the secret.
type adminKey struct {
	KeyID     string  `json:"key_id"`
	VendorID  string  `json:"vendor_id"`
	Prefix    string  `json:"prefix"`
	CreatedAt string  `json:"created_at"`
	ExpiresAt string  `json:"expires_at"`
	RevokedAt *string `json:"revoked_at"`
}

// issuedKey is the answer of key issue, the one time the key is shown.
type issuedKey struct {
	Key       string `json:"key"`
	KeyID     string `json:"key_id"`
	VendorID  string `json:"vendor_id"`
	CreatedAt string `json:"created_at"`
	ExpiresAt string `json:"expires_at"`
}

// adminOrder is every order command's answer.
type adminOrder struct {
	VendorID string     `json:"vendor_id"`
	Order    wire.Order `json:"order"`
}

// show prints raw as indented JSON with -o json, and otherwise decodes it
// into T and writes it as a table.
func show[T any](e *env, raw json.RawMessage, write func(*table, T)) error {
	if e.format == formatJSON {
		return writeJSON(e.out, raw)
	}
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		return fmt.Errorf("read the backend's answer: %w", err)
	}
	t := newTable(e.out)
	write(t, v)
	return t.flush()
}

// writeJSON prints raw indented by two spaces, with a final newline.
func writeJSON(w io.Writer, raw json.RawMessage) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return fmt.Errorf("read the backend's answer: %w", err)
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}

// table is an aligned text table: columns two spaces apart.
type table struct {
	tw *tabwriter.Writer
}

func newTable(w io.Writer) *table {
	return &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
}

// row writes one line of cells. Each cell is cleaned of tabs, newlines and
// other control characters, which would break the alignment or, from a
// hostile company name, drive the operator's terminal.
func (t *table) row(cells ...string) {
	for i, c := range cells {
		if i > 0 {
			io.WriteString(t.tw, "\t")
		}
		io.WriteString(t.tw, cell(c))
	}
	io.WriteString(t.tw, "\n")
}

// note writes a line outside the columns.
func (t *table) note(s string) {
	io.WriteString(t.tw, clean(s)+"\n")
}

func (t *table) flush() error { return t.tw.Flush() }

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

func writeVendor(t *table, v adminVendor) {
	t.row("VENDOR ID", v.VendorID)
	t.row("COMPANY", v.CompanyName)
	t.row("ENVIRONMENT", v.Environment)
	t.row("STATUS", v.Status)
	t.row("SERVICES", services(v.EnabledServices))
	t.row("CREATED", when(v.CreatedAt))
}

func writeVendors(t *table, vs []adminVendor) {
	if len(vs) == 0 {
		t.note("No vendors.")
		return
	}
	t.row("VENDOR ID", "COMPANY", "ENVIRONMENT", "STATUS", "SERVICES", "CREATED")
	for _, v := range vs {
		t.row(v.VendorID, v.CompanyName, v.Environment, v.Status, services(v.EnabledServices), when(v.CreatedAt))
	}
}

func writeIssuedKey(t *table, k issuedKey) {
	t.note("API key (shown only once: it cannot be shown again, store it now):")
	t.note("")
	t.note("    " + k.Key)
	t.note("")
	t.row("KEY ID", k.KeyID)
	t.row("VENDOR ID", k.VendorID)
	t.row("CREATED", when(k.CreatedAt))
	t.row("EXPIRES", when(k.ExpiresAt))
}

// keyState says whether a key works now: revoked, expired or active.
func keyState(k adminKey, now time.Time) string {
	if k.RevokedAt != nil {
		return "revoked"
	}
	if exp, err := time.Parse(time.RFC3339Nano, k.ExpiresAt); err == nil && !now.Before(exp) {
		return "expired"
	}
	return "active"
}

func writeKey(t *table, k adminKey, now time.Time) {
	t.row("KEY ID", k.KeyID)
	t.row("VENDOR ID", k.VendorID)
	t.row("PREFIX", k.Prefix)
	t.row("STATE", keyState(k, now))
	t.row("CREATED", when(k.CreatedAt))
	t.row("EXPIRES", when(k.ExpiresAt))
	t.row("REVOKED", when(str(k.RevokedAt)))
}

func writeKeys(t *table, ks []adminKey, now time.Time) {
	if len(ks) == 0 {
		t.note("No keys.")
		return
	}
	t.row("KEY ID", "PREFIX", "STATE", "CREATED", "EXPIRES", "REVOKED")
	for _, k := range ks {
		t.row(k.KeyID, k.Prefix, keyState(k, now), when(k.CreatedAt), when(k.ExpiresAt), when(str(k.RevokedAt)))
	}
}

func writeOrder(t *table, a adminOrder) {
	o := a.Order
	t.row("ORDER ID", o.OrderID)
	t.row("VENDOR ID", a.VendorID)
	t.row("STATUS", o.Status)
	t.row("FINAL", strconv.FormatBool(o.Final))
	t.row("ENVIRONMENT", o.Environment)
	t.row("MC NUMBER", o.MCNumber)
	t.row("EXTERNAL REF", str(o.ExternalReference))
	t.row("CREATED", o.CreatedAt.UTC().Format("2006-01-02 15:04:05Z"))
	t.row("SAFETY SCORE", safetyScore(o.SafetyScore))
	t.note("")
	t.row("SERVICE", "STATUS", "REASON", "STATE", "COMPLETED", "REPORT / RESULT")
	for _, s := range o.Services {
		t.row(s.Service, s.Status, str(s.Reason), str(s.State), whenPtr(s.CompletedAt), outcome(s))
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
