package store

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// AuditRecord is one entry of the audit trail: an admin action or a report
// download. It holds ids, never driver data. Records are only ever appended
// (AppendAudit) and removed by retention (DeleteAuditBefore): the Store has
// no method that changes one, and both engines refuse an UPDATE of the table.
type AuditRecord struct {
	ID string
	At time.Time
	// Actor is who acted: the admin token's name, "vendor" for a report
	// download (KeyID names the key), "system" for what the backend does on
	// its own (a rotation's scheduled revocation).
	Actor string
	// Action is what was done: one of the Audit* constants of backend/audit.
	Action   string
	VendorID string
	KeyID    string
	OrderID  string
	// Service is the ordered service acted on, when the action names one.
	Service string
	// Address is the client's address: the admin client's, or the one the
	// gateway forwarded for a vendor.
	Address string
	// RequestID joins the record to the access log and the trace.
	RequestID string
}

// AuditFilter selects audit records; a zero field selects all.
type AuditFilter struct {
	VendorID, OrderID, Action string
	// Since keeps records at or after it.
	Since time.Time
	// Limit bounds the records returned, newest first. Required (positive).
	Limit int
}

// AuditCols are the columns, in order, that Dialect.ScanAudit reads.
const AuditCols = "id, at, actor, action, vendor_id, key_id, order_id, service, address, request_id"

// AppendAudit inserts r.
func (a *Common) AppendAudit(ctx context.Context, r *AuditRecord) error {
	ctx, cancel := a.bound(ctx)
	defer cancel()
	err := a.db.Exec(ctx, Bind(a.d.Placeholder, "INSERT INTO audit_log ("+AuditCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
		r.ID, a.d.Time(r.At), r.Actor, r.Action, r.VendorID, r.KeyID, r.OrderID, r.Service, r.Address, r.RequestID)
	if err != nil {
		return fmt.Errorf("append audit record %s (%s): %w", r.ID, r.Action, err)
	}
	return nil
}

// ListAudit lists the records f selects, newest first, at most f.Limit.
func (a *Common) ListAudit(ctx context.Context, f AuditFilter) ([]*AuditRecord, error) {
	if f.Limit <= 0 {
		return nil, fmt.Errorf("list audit records: limit %d is not positive", f.Limit)
	}
	var where []string
	var args []any
	for _, c := range []struct{ col, v string }{{"vendor_id", f.VendorID}, {"order_id", f.OrderID}, {"action", f.Action}} {
		if c.v != "" {
			where = append(where, c.col+" = ?")
			args = append(args, c.v)
		}
	}
	if !f.Since.IsZero() {
		where = append(where, "at >= ?")
		args = append(args, a.d.Time(f.Since))
	}
	q := "SELECT " + AuditCols + " FROM audit_log"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY at DESC, seq DESC LIMIT ?" // seq: as written, where the clock gave two the same instant
	args = append(args, f.Limit)
	out, err := list(ctx, a, a.d.ScanAudit, Bind(a.d.Placeholder, q), args...)
	if err != nil {
		return nil, fmt.Errorf("list audit records: %w", err)
	}
	return out, nil
}

// DeleteAuditBefore deletes the records older than t (retention) and
// returns how many it deleted.
func (a *Common) DeleteAuditBefore(ctx context.Context, t time.Time) (int, error) {
	ctx, cancel := a.bound(ctx)
	defer cancel()
	var n int
	err := a.tx(ctx, func(tx DB) error {
		if err := tx.QueryRow(ctx, Bind(a.d.Placeholder, "SELECT COUNT(*) FROM audit_log WHERE at < ?"), a.d.Time(t)).Scan(&n); err != nil {
			return err
		}
		return tx.Exec(ctx, Bind(a.d.Placeholder, "DELETE FROM audit_log WHERE at < ?"), a.d.Time(t))
	})
	if err != nil {
		return 0, fmt.Errorf("delete audit records before %s: %w", t.Format(time.RFC3339), err)
	}
	return n, nil
}
