package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"vendorgate/cmd/vendorctl/internal/view"
	"vendorgate/config"
	"vendorgate/shared/wire"
)

// orderStatuses and holdReasons are what --status and --reason take.
func orderStatuses() []string {
	return []string{wire.StatusUnderReview, wire.StatusProcessing, wire.StatusCompleted,
		wire.StatusPartiallyCompleted, wire.StatusFailed}
}

func holdReasons() []string {
	return []string{wire.ReasonIdentityReview, wire.ReasonManualReview, wire.ReasonReportReview}
}

// orderList is the staff's order queue: every vendor's orders, newest
// first, narrowed by the flags; each is checked here so that a typo is a
// usage error before any call.
func orderList(e *env, inv *invocation) error {
	q := url.Values{}
	if s, ok := inv.flags["status"]; ok {
		if !slices.Contains(orderStatuses(), s) {
			return usagef(inv.cmd, "--status %q: use one of %s", s, strings.Join(orderStatuses(), ", "))
		}
		q.Set("status", s)
	}
	if s, ok := inv.flags["reason"]; ok {
		if !slices.Contains(holdReasons(), s) {
			return usagef(inv.cmd, "--reason %q: use a hold reason, one of %s", s, strings.Join(holdReasons(), ", "))
		}
		q.Set("reason", s)
	}
	if s, ok := inv.flags["vendor"]; ok {
		id, err := uuidFlag(inv, "vendor", s)
		if err != nil {
			return err
		}
		q.Set("vendor_id", id)
	}
	if s, ok := inv.flags["since"]; ok {
		since, err := parseSince(s, e.now())
		if err != nil {
			return usagef(inv.cmd, "--since %q: %v", s, err)
		}
		q.Set("since", since.UTC().Format(time.RFC3339))
	}
	if s, ok := inv.flags["limit"]; ok {
		// Digits only: strconv.Atoi also reads a sign ("+5").
		if n, err := strconv.Atoi(s); err != nil || n < 1 || n > 200 || strings.TrimLeft(s, "0123456789") != "" {
			return usagef(inv.cmd, "--limit %q: a whole number from 1 to 200", s)
		}
		q.Set("limit", s)
	}
	if s, ok := inv.flags["cursor"]; ok {
		q.Set("cursor", s)
	}
	path := "/admin/v1/orders"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	raw, err := e.api.Do(e.ctx, http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	// A person reads the queue by company: the table names each vendor's
	// (one call for the vendors); -o json prints the backend's answer as is.
	companies := map[string]string{}
	if e.format != formatJSON && strings.Contains(string(raw), `"vendor_id"`) {
		if companies, err = vendorCompanies(e); err != nil {
			return err
		}
	}
	return show(e, raw, func(w *view.Table, p view.OrderQueue) {
		view.WriteOrderQueue(w, p, companies, e.now())
		if p.NextCursor != nil {
			w.Note("")
			w.Note("More orders: add --cursor " + *p.NextCursor)
		}
	})
}

// vendorCompanies maps every vendor's id to its company name.
func vendorCompanies(e *env) (map[string]string, error) {
	raw, err := e.api.Do(e.ctx, http.MethodGet, "/admin/v1/vendors", nil)
	if err != nil {
		return nil, err
	}
	list, err := member(raw, "vendors")
	if err != nil {
		return nil, err
	}
	var vendors []view.Vendor
	if err := json.Unmarshal(list, &vendors); err != nil {
		return nil, fmt.Errorf("read the backend's vendors: %w", err)
	}
	m := make(map[string]string, len(vendors))
	for _, v := range vendors {
		m[v.VendorID] = v.CompanyName
	}
	return m, nil
}

// parseSince reads --since: a time back from now (24h, 7d, 90m) or an
// RFC 3339 time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	d, err := config.ParseDuration(s)
	if err != nil || d <= 0 {
		return time.Time{}, errSince
	}
	return now.Add(-d), nil
}

// errSince says what --since takes.
var errSince = errors.New("use a time back from now (24h, 7d, 90m) or an RFC 3339 time (2026-03-14T15:00:00Z)")

// uuidFlag checks a flag that holds an id the specification makes a UUID.
func uuidFlag(inv *invocation, name, s string) (string, error) {
	if len(s) != 36 || uuid.Validate(s) != nil {
		return "", usagef(inv.cmd, "--%s %q is not a UUID", name, s)
	}
	return strings.ToLower(s), nil
}
