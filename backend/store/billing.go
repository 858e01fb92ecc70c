package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ServiceUsage is what one vendor's orders placed in a period asked of one
// service in one environment, and where those services stand now. The
// orders are the record: it is counted from them, not kept beside them.
type ServiceUsage struct {
	VendorID    string
	Environment string
	Service     string
	// Ordered counts the orders placed in the period that include the
	// service.
	Ordered int64
	// Completed, Failed and Held (under_review) count those services by
	// status; NoRecord counts the failed ones whose reason is no_record
	// (billed as NO_HIT).
	Completed, Failed, NoRecord, Held int64
}

// Billable counts the services that bill: completed, or failed no_record.
func (u ServiceUsage) Billable() int64 { return u.Completed + u.NoRecord }

// GatewayUsage is one vendor's requests under one limit policy over a
// period, as the gateways counted them: allowed, limited (an enforced
// limit refused) and shadow-limited (a shadow limit would have).
type GatewayUsage struct {
	VendorID, Policy                string
	Allowed, Limited, ShadowLimited int64
}

// UsageFlush is one gateway usage flush (or one part of it): counts of one
// UTC day to add to the daily totals, once per ID.
type UsageFlush struct {
	// ID names the flush: applying one ID again adds nothing.
	ID string
	// Day is the UTC day the counts belong to, YYYY-MM-DD.
	Day string
	// At is when the backend took the flush; the ID is remembered
	// UsageFlushMemory from then.
	At   time.Time
	Rows []GatewayUsage
}

// UsageFlushMemory is how long an applied flush's ID is remembered: a
// gateway keeps a failed flush for retry an hour by default, and a retry
// later than this would count twice.
const UsageFlushMemory = 48 * time.Hour

// BillingEvent is one billable service in the export outbox. Its ID is the
// same for the same service whenever it is found, so that the receiver
// dedupes a resend.
type BillingEvent struct {
	ID, VendorID, OrderID, Service, Environment string
	// Outcome is "completed" or "no_record".
	Outcome string
	// At is when the service completed; for a failed no_record service,
	// which has no completion time, when the outbox first found it.
	At       time.Time
	Attempts int
}

// BillingEventCols are the columns, in order, that Dialect.ScanBillingEvent
// reads.
const BillingEventCols = "id, vendor_id, order_id, service, environment, outcome, at, attempts"

// BillingEventID is the event id of an order's service.
func BillingEventID(orderID, service string) string { return "svc:" + orderID + ":" + service }

// ServiceUsage counts, per vendor, environment and service, the services
// of the orders placed at or after from and before to; vendorID "" is every
// vendor. Ordered by vendor, environment, service.
func (a *Common) ServiceUsage(ctx context.Context, vendorID string, from, to time.Time) ([]ServiceUsage, error) {
	q := "SELECT o.vendor_id, o.environment, s.service, COUNT(*)," +
		" SUM(CASE WHEN s.status = 'completed' THEN 1 ELSE 0 END)," +
		" SUM(CASE WHEN s.status = 'failed' THEN 1 ELSE 0 END)," +
		" SUM(CASE WHEN s.status = 'failed' AND s.reason = 'no_record' THEN 1 ELSE 0 END)," +
		" SUM(CASE WHEN s.status = 'under_review' THEN 1 ELSE 0 END)" +
		" FROM orders o JOIN order_services s ON s.order_id = o.id WHERE o.created_at >= ? AND o.created_at < ?"
	args := []any{a.d.Time(from), a.d.Time(to)}
	if vendorID != "" {
		q += " AND o.vendor_id = ?"
		args = append(args, vendorID)
	}
	q += " GROUP BY o.vendor_id, o.environment, s.service ORDER BY o.vendor_id, o.environment, s.service"
	out, err := list(ctx, a, func(r Scanner) (ServiceUsage, error) {
		var u ServiceUsage
		err := r.Scan(&u.VendorID, &u.Environment, &u.Service, &u.Ordered, &u.Completed, &u.Failed, &u.NoRecord, &u.Held)
		return u, err
	}, Bind(a.d.Placeholder, q), args...)
	if err != nil {
		return nil, fmt.Errorf("service usage from %s to %s: %w", from.Format(time.RFC3339), to.Format(time.RFC3339), err)
	}
	return out, nil
}

// ApplyUsageFlush adds f's rows to the daily totals, in one transaction,
// unless a flush with f.ID was applied before (then it adds nothing and
// applied is false). It forgets the IDs of flushes older than
// UsageFlushMemory.
func (a *Common) ApplyUsageFlush(ctx context.Context, f UsageFlush) (applied bool, err error) {
	if f.ID == "" {
		return false, fmt.Errorf("apply usage flush: no id")
	}
	if _, err := time.Parse(time.DateOnly, f.Day); err != nil {
		return false, fmt.Errorf("apply usage flush %s: day %q: %w", f.ID, f.Day, err)
	}
	ctx, cancel := a.bound(ctx)
	defer cancel()
	err = a.tx(ctx, func(tx DB) error {
		var id string
		err := tx.QueryRow(ctx, Bind(a.d.Placeholder, "INSERT INTO usage_flushes (id, at) VALUES (?, ?) ON CONFLICT (id) DO NOTHING RETURNING id"),
			f.ID, a.d.Time(f.At)).Scan(&id)
		if a.isNoRows(err) {
			return nil // applied before
		}
		if err != nil {
			return err
		}
		for _, r := range f.Rows {
			err := tx.Exec(ctx, Bind(a.d.Placeholder, "INSERT INTO usage_daily (day, vendor_id, policy, allowed, limited, shadow_limited) VALUES (?, ?, ?, ?, ?, ?)"+
				" ON CONFLICT (day, vendor_id, policy) DO UPDATE SET allowed = usage_daily.allowed + excluded.allowed,"+
				" limited = usage_daily.limited + excluded.limited, shadow_limited = usage_daily.shadow_limited + excluded.shadow_limited"),
				f.Day, r.VendorID, r.Policy, r.Allowed, r.Limited, r.ShadowLimited)
			if err != nil {
				return err
			}
		}
		applied = true
		return tx.Exec(ctx, Bind(a.d.Placeholder, "DELETE FROM usage_flushes WHERE at < ?"), a.d.Time(f.At.Add(-UsageFlushMemory)))
	})
	if err != nil {
		return false, fmt.Errorf("apply usage flush %s: %w", f.ID, err)
	}
	return applied, nil
}

// GatewayUsage sums the daily totals of the days from fromDay (inclusive)
// to toDay (exclusive), YYYY-MM-DD, per vendor and policy; vendorID "" is
// every vendor. Ordered by vendor, policy.
func (a *Common) GatewayUsage(ctx context.Context, vendorID, fromDay, toDay string) ([]GatewayUsage, error) {
	q := "SELECT vendor_id, policy, SUM(allowed), SUM(limited), SUM(shadow_limited) FROM usage_daily WHERE day >= ? AND day < ?"
	args := []any{fromDay, toDay}
	if vendorID != "" {
		q += " AND vendor_id = ?"
		args = append(args, vendorID)
	}
	q += " GROUP BY vendor_id, policy ORDER BY vendor_id, policy"
	out, err := list(ctx, a, func(r Scanner) (GatewayUsage, error) {
		var u GatewayUsage
		err := r.Scan(&u.VendorID, &u.Policy, &u.Allowed, &u.Limited, &u.ShadowLimited)
		return u, err
	}, Bind(a.d.Placeholder, q), args...)
	if err != nil {
		return nil, fmt.Errorf("gateway usage from %s to %s: %w", fromDay, toDay, err)
	}
	return out, nil
}

// EnqueueBillable puts into the outbox every billable service (completed,
// or failed no_record) of the orders placed at or after since that is not
// there yet, each due at now; a service with no completion time gets now
// as its time. Running it again adds nothing for a service already there.
func (a *Common) EnqueueBillable(ctx context.Context, since, now time.Time) error {
	ctx, cancel := a.bound(ctx)
	defer cancel()
	q := "INSERT INTO billing_outbox (id, vendor_id, order_id, service, environment, outcome, at, attempts, next_attempt_at)" +
		" SELECT 'svc:' || o.id || ':' || s.service, o.vendor_id, o.id, s.service, o.environment," +
		" CASE WHEN s.status = 'completed' THEN 'completed' ELSE 'no_record' END, COALESCE(s.completed_at, ?), 0, ?" +
		" FROM orders o JOIN order_services s ON s.order_id = o.id" +
		" WHERE o.created_at >= ? AND (s.status = 'completed' OR (s.status = 'failed' AND s.reason = 'no_record'))" +
		" ON CONFLICT (id) DO NOTHING"
	if err := a.db.Exec(ctx, Bind(a.d.Placeholder, q), a.d.Time(now), a.d.Time(now), a.d.Time(since)); err != nil {
		return fmt.Errorf("enqueue billable services: %w", err)
	}
	return nil
}

// DueBillingEvents lists the outbox's events not sent whose next attempt
// is at or before now, the longest waiting first, at most limit.
func (a *Common) DueBillingEvents(ctx context.Context, now time.Time, limit int) ([]*BillingEvent, error) {
	out, err := list(ctx, a, a.d.ScanBillingEvent, Bind(a.d.Placeholder,
		"SELECT "+BillingEventCols+" FROM billing_outbox WHERE sent_at IS NULL AND next_attempt_at <= ? ORDER BY next_attempt_at, id LIMIT ?"),
		a.d.Time(now), limit)
	if err != nil {
		return nil, fmt.Errorf("due billing events: %w", err)
	}
	return out, nil
}

// MarkBillingSent records the events ids as sent at at.
func (a *Common) MarkBillingSent(ctx context.Context, ids []string, at time.Time) error {
	return a.billingUpdate(ctx, "mark billing events sent", "sent_at = ?", a.d.Time(at), ids)
}

// RetryBillingEvents counts an attempt of the events ids and makes them due
// again at next.
func (a *Common) RetryBillingEvents(ctx context.Context, ids []string, next time.Time) error {
	return a.billingUpdate(ctx, "retry billing events", "attempts = attempts + 1, next_attempt_at = ?", a.d.Time(next), ids)
}

func (a *Common) billingUpdate(ctx context.Context, what, set string, v any, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	ctx, cancel := a.bound(ctx)
	defer cancel()
	args := []any{v}
	for _, id := range ids {
		args = append(args, id)
	}
	q := "UPDATE billing_outbox SET " + set + " WHERE id IN (?" + strings.Repeat(", ?", len(ids)-1) + ")"
	if err := a.db.Exec(ctx, Bind(a.d.Placeholder, q), args...); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// CountBillingOutbox counts the outbox's events waiting to be sent.
func (a *Common) CountBillingOutbox(ctx context.Context) (int, error) {
	ctx, cancel := a.bound(ctx)
	defer cancel()
	var n int
	if err := a.db.QueryRow(ctx, "SELECT COUNT(*) FROM billing_outbox WHERE sent_at IS NULL").Scan(&n); err != nil {
		return 0, fmt.Errorf("count billing outbox: %w", err)
	}
	return n, nil
}

func (a *Common) isNoRows(err error) bool { return err != nil && errors.Is(err, a.d.NoRows) }
