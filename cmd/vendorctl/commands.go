package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"vendorgate/cmd/vendorctl/internal/view"
	"vendorgate/config"
	"vendorgate/shared/apikey"
	"vendorgate/shared/wire"
)

// maxLifetime bounds --lifetime so that days never overflow a Duration; the
// backend applies its own policy within it.
const maxLifetime = 100 * 365 * 24 * time.Hour

// pdfMagic starts every PDF file.
const pdfMagic = "%PDF-"

func vendorPath(id string) string { return "/admin/v1/vendors/" + url.PathEscape(id) }
func orderPath(id string) string  { return "/admin/v1/orders/" + url.PathEscape(id) }

func vendorCreate(e *env, inv *invocation) error {
	company := strings.TrimSpace(inv.flags["company"])
	if company == "" {
		return usagef(inv.cmd, "--company is required")
	}
	environment, ok := inv.flags["environment"]
	if !ok {
		return usagef(inv.cmd, "--environment is required (sandbox or live)")
	}
	if environment != apikey.Sandbox && environment != apikey.Live {
		return usagef(inv.cmd, "--environment %q: use sandbox or live", environment)
	}
	services, err := parseServices(inv.flags["services"])
	if err != nil {
		return usagef(inv.cmd, "--services: %v", err)
	}
	raw, err := e.api.Do(e.ctx, http.MethodPost, "/admin/v1/vendors", map[string]any{
		"company_name": company, "environment": environment, "enabled_services": services,
	})
	if err != nil {
		return err
	}
	return show(e, raw, func(w *view.Table, v view.Vendor) {
		view.WriteVendor(w, v)
		if v.Status == wire.VendorPending {
			w.Note("")
			w.Note("The vendor is pending approval: vendorctl vendor approve " + v.VendorID)
		}
	})
}

// vendorAction is approve, suspend or reinstate: a POST with no body.
func vendorAction(action string) func(*env, *invocation) error {
	return func(e *env, inv *invocation) error {
		id, err := uuidArg(inv, 0)
		if err != nil {
			return err
		}
		raw, err := e.api.Do(e.ctx, http.MethodPost, vendorPath(id)+"/"+action, nil)
		if err != nil {
			return err
		}
		return show(e, raw, func(w *view.Table, v view.VendorChange) { view.WriteVendorChange(w, v, e.now()) })
	}
}

func vendorServices(e *env, inv *invocation) error {
	id, err := uuidArg(inv, 0)
	if err != nil {
		return err
	}
	services, err := parseServices(inv.args[1])
	if err != nil {
		return usagef(inv.cmd, "SERVICES: %v", err)
	}
	raw, err := e.api.Do(e.ctx, http.MethodPut, vendorPath(id)+"/services", map[string]any{"enabled_services": services})
	if err != nil {
		return err
	}
	return show(e, raw, func(w *view.Table, v view.VendorChange) { view.WriteVendorChange(w, v, e.now()) })
}

func vendorGet(e *env, inv *invocation) error {
	id, err := uuidArg(inv, 0)
	if err != nil {
		return err
	}
	raw, err := e.api.Do(e.ctx, http.MethodGet, vendorPath(id), nil)
	if err != nil {
		return err
	}
	return show(e, raw, view.WriteVendor)
}

func vendorList(e *env, _ *invocation) error {
	raw, err := e.api.Do(e.ctx, http.MethodGet, "/admin/v1/vendors", nil)
	if err != nil {
		return err
	}
	list, err := member(raw, "vendors")
	if err != nil {
		return err
	}
	return show(e, list, view.WriteVendors)
}

func keyIssue(e *env, inv *invocation) error {
	id, err := uuidArg(inv, 0)
	if err != nil {
		return err
	}
	body := map[string]any{}
	if s, ok := inv.flags["lifetime"]; ok {
		secs, err := parseLifetime(s)
		if err != nil {
			return usagef(inv.cmd, "--lifetime: %v", err)
		}
		body["lifetime_seconds"] = secs
	}
	raw, err := e.api.Do(e.ctx, http.MethodPost, vendorPath(id)+"/keys", body)
	if err != nil {
		return err
	}
	return show(e, raw, view.WriteIssuedKey)
}

func keyRevoke(e *env, inv *invocation) error {
	id, err := uuidArg(inv, 0)
	if err != nil {
		return err
	}
	raw, err := e.api.Do(e.ctx, http.MethodPost, "/admin/v1/keys/"+url.PathEscape(id)+"/revoke", nil)
	if err != nil {
		return err
	}
	return show(e, raw, func(w *view.Table, k view.RevokedKey) { view.WriteRevokedKey(w, k, e.now()) })
}

// defaultOverlap is how long both keys of a rotation work unless --overlap
// says otherwise.
const defaultOverlap = 24 * time.Hour

func keyRotate(e *env, inv *invocation) error {
	id, err := uuidArg(inv, 0)
	if err != nil {
		return err
	}
	overlap := defaultOverlap
	if s, ok := inv.flags["overlap"]; ok {
		if overlap, err = parseOverlap(s); err != nil {
			return usagef(inv.cmd, "--overlap: %v", err)
		}
	}
	raw, err := e.api.Do(e.ctx, http.MethodPost, "/admin/v1/keys/"+url.PathEscape(id)+"/rotate",
		map[string]any{"overlap_seconds": int64(overlap / time.Second)})
	if err != nil {
		return err
	}
	return show(e, raw, func(w *view.Table, k view.RotatedKey) { view.WriteRotatedKey(w, k, e.now()) })
}

// maxExpiring is the admin API's bound on --expiring: a year.
const maxExpiring = 366 * 24 * time.Hour

// keyListExpiring lists every vendor's working keys that expire within s.
func keyListExpiring(e *env, inv *invocation, s string) error {
	d, err := config.ParseDuration(s)
	switch {
	case err != nil:
		return usagef(inv.cmd, "--expiring %q is not a span (use 14d, 7d or 36h)", s)
	case d < time.Second || d > maxExpiring:
		return usagef(inv.cmd, "--expiring %q: use 1s to 366d", s)
	}
	raw, err := e.api.Do(e.ctx, http.MethodGet, "/admin/v1/keys?expiring_within_seconds="+strconv.FormatInt(int64(d/time.Second), 10), nil)
	if err != nil {
		return err
	}
	list, err := member(raw, "keys")
	if err != nil {
		return err
	}
	return show(e, list, func(w *view.Table, ks []view.Key) { view.WriteExpiringKeys(w, ks, e.now()) })
}

// maxOverlap is the admin API's bound on a rotation's overlap.
const maxOverlap = 90 * 24 * time.Hour

// parseOverlap reads a rotation's overlap: 0, days (2d) or a Go duration
// of whole seconds (24h, 90m), at most 90 days.
func parseOverlap(s string) (time.Duration, error) {
	if strings.HasPrefix(strings.TrimSpace(s), "-") {
		return 0, fmt.Errorf("%q is negative: use 0 to revoke the old key now, or a duration such as 24h", s)
	}
	if days, ok := strings.CutSuffix(s, "d"); ok && len(days) > 6 {
		return 0, fmt.Errorf("%q is longer than %d days", s, int(maxOverlap/(24*time.Hour)))
	}
	d, err := config.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not an overlap (use 0, 24h, 90m or 2d)", s)
	}
	switch {
	case d > maxOverlap:
		return 0, fmt.Errorf("%q is longer than %d days", s, int(maxOverlap/(24*time.Hour)))
	case d%time.Second != 0:
		return 0, fmt.Errorf("%q is not a whole number of seconds", s)
	}
	return d, nil
}

func keyList(e *env, inv *invocation) error {
	if s, ok := inv.flags["expiring"]; ok {
		return keyListExpiring(e, inv, s)
	}
	id, err := uuidArg(inv, 0)
	if err != nil {
		return err
	}
	raw, err := e.api.Do(e.ctx, http.MethodGet, vendorPath(id)+"/keys", nil)
	if err != nil {
		return err
	}
	list, err := member(raw, "keys")
	if err != nil {
		return err
	}
	return show(e, list, func(w *view.Table, ks []view.Key) { view.WriteKeys(w, ks, e.now()) })
}

func orderGet(e *env, inv *invocation) error {
	return orderCall(e, inv, http.MethodGet, "", nil)
}

func orderRelease(e *env, inv *invocation) error {
	body := map[string]any{}
	if s, ok := inv.flags["service"]; ok {
		if !wire.IsService(s) {
			return usagef(inv.cmd, "--service %q: use one of %s", s, strings.Join(wire.Services(), ", "))
		}
		body["service"] = s
	}
	return orderCall(e, inv, http.MethodPost, "/release", body)
}

func orderComplete(e *env, inv *invocation) error {
	service, err := serviceFlag(inv)
	if err != nil {
		return err
	}
	body := map[string]any{"service": service}
	if path, ok := inv.flags["file"]; ok {
		if !wire.HasReport(service) {
			return usagef(inv.cmd, "--file is for the report services (mvr, psp, cdlis), not %s", service)
		}
		pdf, err := readPDF(path)
		if err != nil {
			return usagef(inv.cmd, "--file: %v", err)
		}
		body["report_pdf_base64"] = base64.StdEncoding.EncodeToString(pdf)
	}
	if path, ok := inv.flags["result"]; ok {
		if service != wire.DriverReviews {
			return usagef(inv.cmd, "--result is for driver_reviews only, not %s", service)
		}
		result, err := readResult(path)
		if err != nil {
			return usagef(inv.cmd, "--result: %v", err)
		}
		body["result"] = result
	}
	return orderCall(e, inv, http.MethodPost, "/complete", body)
}

func orderFail(e *env, inv *invocation) error {
	service, err := serviceFlag(inv)
	if err != nil {
		return err
	}
	reason, ok := inv.flags["reason"]
	if !ok {
		return usagef(inv.cmd, "--reason is required (one of %s)", strings.Join(failReasons(), ", "))
	}
	if !slices.Contains(failReasons(), reason) {
		return usagef(inv.cmd, "--reason %q: use one of %s", reason, strings.Join(failReasons(), ", "))
	}
	return orderCall(e, inv, http.MethodPost, "/fail", map[string]any{"service": service, "reason": reason})
}

func orderDelete(e *env, inv *invocation) error {
	return orderCall(e, inv, http.MethodDelete, "", nil)
}

// orderCall is every order command: each answers {"vendor_id","order"}.
func orderCall(e *env, inv *invocation, method, suffix string, body any) error {
	id, err := uuidArg(inv, 0)
	if err != nil {
		return err
	}
	raw, err := e.api.Do(e.ctx, method, orderPath(id)+suffix, body)
	if err != nil {
		return err
	}
	return show(e, raw, view.WriteOrder)
}

// failReasons are the specification's reasons that go with status failed.
func failReasons() []string {
	return []string{wire.ReasonProviderFailed, wire.ReasonNoRecord, wire.ReasonNoReport,
		wire.ReasonTimedOut, wire.ReasonIdentityUnverified, wire.ReasonRecordDeleted}
}

// uuidArg is positional argument i, which the specification makes a UUID
// (vendor_id, order_id), so that a mistyped id is caught before any call.
func uuidArg(inv *invocation, i int) (string, error) {
	s := inv.args[i]
	if len(s) != 36 || uuid.Validate(s) != nil {
		return "", usagef(inv.cmd, "%s %q is not a UUID", inv.cmd.args[i], s)
	}
	return strings.ToLower(s), nil
}

func serviceFlag(inv *invocation) (string, error) {
	s, ok := inv.flags["service"]
	if !ok {
		return "", usagef(inv.cmd, "--service is required")
	}
	if !wire.IsService(s) {
		return "", usagef(inv.cmd, "--service %q: use one of %s", s, strings.Join(wire.Services(), ", "))
	}
	return s, nil
}

// parseServices reads "mvr,psp": known names, no repeats. "" and "none"
// mean no service at all (a vendor may have none enabled). The result is
// never nil, so it is sent as [] rather than null.
func parseServices(s string) ([]string, error) {
	out := []string{}
	if t := strings.TrimSpace(s); t == "" || t == "none" {
		return out, nil
	}
	seen := map[string]bool{}
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		if !wire.IsService(name) {
			return nil, fmt.Errorf("%q is not a service (use %s)", name, strings.Join(wire.Services(), ", "))
		}
		if seen[name] {
			return nil, fmt.Errorf("%s is listed twice", name)
		}
		seen[name] = true
		out = append(out, name)
	}
	return out, nil
}

// parseLifetime reads days (90d) or a Go duration (36h, 2s) and returns
// whole seconds, at least one.
func parseLifetime(s string) (int64, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok && len(days) > 6 {
		return 0, fmt.Errorf("%q is longer than %v", s, maxLifetime)
	}
	d, err := config.ParseDuration(s)
	if err != nil {
		// Not config's message: it suggests 500ms, which a lifetime refuses.
		return 0, fmt.Errorf("%q is not a lifetime (use 90d, 36h or 2s: whole days, or a duration of whole seconds)", s)
	}
	switch {
	case d < time.Second:
		return 0, fmt.Errorf("%q is shorter than one second", s)
	case d > maxLifetime:
		return 0, fmt.Errorf("%q is longer than %d days", s, int(maxLifetime/(24*time.Hour)))
	case d%time.Second != 0:
		return 0, fmt.Errorf("%q is not a whole number of seconds", s)
	}
	return int64(d / time.Second), nil
}

// readPDF reads a report file and refuses one that does not start as a PDF,
// before it is sent anywhere.
func readPDF(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if !bytes.HasPrefix(b, []byte(pdfMagic)) {
		return nil, fmt.Errorf("%s is not a PDF (it does not start with %s)", path, pdfMagic)
	}
	return b, nil
}

// readResult reads a driver_reviews result, refusing unknown fields so that
// a typo is not silently dropped.
func readResult(path string) (*wire.ReviewsResult, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var r wire.ReviewsResult
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("%s is not a driver_reviews result ({\"found\":bool,\"reviews\":[...]}): %v", path, err)
	}
	if r.Reviews == nil {
		r.Reviews = []wire.Review{}
	}
	return &r, nil
}

// member is one member of an answer object, which must be present.
func member(raw json.RawMessage, name string) (json.RawMessage, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, fmt.Errorf("read the backend's answer: %w", err)
	}
	m, ok := obj[name]
	if !ok {
		return nil, fmt.Errorf("read the backend's answer: no %q member", name)
	}
	if string(m) == "null" {
		return json.RawMessage("[]"), nil
	}
	return m, nil
}

// show prints raw as indented JSON with -o json, and otherwise decodes it
// into T and writes it as a table.
func show[T any](e *env, raw json.RawMessage, write func(*view.Table, T)) error {
	if e.format == formatJSON {
		return view.JSON(e.out, raw)
	}
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		return fmt.Errorf("read the backend's answer: %w", err)
	}
	t := view.NewTable(e.out)
	write(t, v)
	return t.Flush()
}
