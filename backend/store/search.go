package store

import (
	"strings"
	"time"

	"vendorgate/shared/wire"
)

// OrderFilter narrows the staff's order list (SearchOrders); a zero field
// does not filter.
type OrderFilter struct {
	// Status is the order's status (under_review, processing, ...).
	Status string
	// HeldFor keeps the orders with a service held under_review for this
	// reason (identity_review, manual_review, report_review).
	HeldFor string
	// VendorID keeps one vendor's orders.
	VendorID string
	// Since keeps the orders placed at or after it.
	Since time.Time
}

// SearchWhere is the WHERE clause, with ? parameters, and its arguments
// that select the orders of f after the cursor, for both engines: stored
// gives a time as the engine stores it.
func SearchWhere(f OrderFilter, after *Cursor, stored func(time.Time) any) (string, []any) {
	var conds []string
	var args []any
	if f.Status != "" {
		conds = append(conds, "status = ?")
		args = append(args, f.Status)
	}
	if f.HeldFor != "" {
		conds = append(conds, "EXISTS (SELECT 1 FROM order_services s WHERE s.order_id = orders.id AND s.status = ? AND s.reason = ?)")
		args = append(args, wire.StatusUnderReview, f.HeldFor)
	}
	if f.VendorID != "" {
		conds = append(conds, "vendor_id = ?")
		args = append(args, f.VendorID)
	}
	if !f.Since.IsZero() {
		conds = append(conds, "created_at >= ?")
		args = append(args, stored(f.Since))
	}
	if after != nil {
		conds = append(conds, "(created_at < ? OR (created_at = ? AND id < ?))")
		at := stored(after.CreatedAt)
		args = append(args, at, at, after.OrderID)
	}
	if len(conds) == 0 {
		return "", nil
	}
	return " WHERE " + strings.Join(conds, " AND "), args
}
