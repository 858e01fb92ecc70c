package main

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"vendorgate/backend/audit"
	"vendorgate/cmd/vendorctl/internal/view"
)

// auditList reads the audit trail, newest first, narrowed by the flags;
// each is checked here so that a typo is a usage error before any call.
func auditList(e *env, inv *invocation) error {
	q := url.Values{}
	for flag, param := range map[string]string{"vendor": "vendor_id", "order": "order_id"} {
		if s, ok := inv.flags[flag]; ok {
			id, err := uuidFlag(inv, flag, s)
			if err != nil {
				return err
			}
			q.Set(param, id)
		}
	}
	if s, ok := inv.flags["action"]; ok {
		if !slices.Contains(audit.Actions, s) {
			return usagef(inv.cmd, "--action %q: use one of %s", s, strings.Join(audit.Actions, ", "))
		}
		q.Set("action", s)
	}
	if s, ok := inv.flags["since"]; ok {
		since, err := parseSince(s, e.now())
		if err != nil {
			return usagef(inv.cmd, "--since %q: %v", s, err)
		}
		q.Set("since", since.UTC().Format(time.RFC3339))
	}
	if s, ok := inv.flags["limit"]; ok {
		if n, err := strconv.Atoi(s); err != nil || n < 1 || n > 1000 || strings.TrimLeft(s, "0123456789") != "" {
			return usagef(inv.cmd, "--limit %q: a whole number from 1 to 1000", s)
		}
		q.Set("limit", s)
	}
	path := "/admin/v1/audit"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	raw, err := e.api.Do(e.ctx, http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	list, err := member(raw, "records")
	if err != nil {
		return err
	}
	return show(e, list, func(w *view.Table, rs []audit.Record) {
		if len(rs) == 0 {
			w.Note("No audit record matches.")
			return
		}
		w.Row("AT", "ACTOR", "ACTION", "VENDOR ID", "KEY ID", "ORDER ID", "SERVICE", "ADDRESS", "REQUEST ID")
		for _, r := range rs {
			w.Row(r.At.UTC().Format(time.RFC3339), r.Actor, r.Action, orDash(r.VendorID), orDash(r.KeyID), orDash(r.OrderID),
				orDash(r.Service), r.Address, orDash(r.RequestID))
		}
	})
}

func orDash(s *string) string {
	if s == nil || *s == "" {
		return "-"
	}
	return *s
}
