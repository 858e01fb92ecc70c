package orders

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"vendorgate/backend/orders/placement"
	"vendorgate/backend/store"
	"vendorgate/shared/wire"
)

// QueueQuery is the staff's order list query, as the admin API received it
// ("" when a parameter is absent).
type QueueQuery struct {
	// Status is an order status (under_review for the review queue).
	Status string
	// Reason is a hold reason: the orders with a service held for it.
	Reason string
	// VendorID is one vendor's id.
	VendorID string
	// Since is an RFC 3339 time: orders placed at or after it.
	Since string
	// Limit and Cursor page as the vendor's order list pages.
	Limit, Cursor string
}

// QueueEntry is one order of the staff's list: the order as its vendor
// sees it, whose it is, and when the deadline closes it.
type QueueEntry struct {
	VendorID string `json:"vendor_id"`
	// DeadlineAt is when the sweeper closes the order if it is still not
	// final: placement plus the configured deadline.
	DeadlineAt time.Time  `json:"deadline_at"`
	Order      wire.Order `json:"order"`
}

// QueuePage is one page of the staff's list, newest first.
type QueuePage struct {
	Orders     []QueueEntry `json:"orders"`
	NextCursor *string      `json:"next_cursor"`
}

// HoldReasons are the reasons a service is held under_review for staff.
func HoldReasons() []string {
	return []string{wire.ReasonIdentityReview, wire.ReasonManualReview, wire.ReasonReportReview}
}

// orderStatuses are the statuses an order can have.
func orderStatuses() []string {
	return []string{wire.StatusProcessing, wire.StatusUnderReview, wire.StatusCompleted,
		wire.StatusPartiallyCompleted, wire.StatusFailed}
}

// parse checks every parameter of q and names each one that is wrong.
func (q QueueQuery) parse() (store.OrderFilter, *store.Cursor, int, error) {
	var f store.OrderFilter
	var after *store.Cursor
	n := DefaultListLimit
	bad := map[string]string{}
	if q.Status != "" {
		if !slices.Contains(orderStatuses(), q.Status) {
			bad["status"] = "one of " + strings.Join(orderStatuses(), ", ")
		}
		f.Status = q.Status
	}
	if q.Reason != "" {
		if !slices.Contains(HoldReasons(), q.Reason) {
			bad["reason"] = "a hold reason: one of " + strings.Join(HoldReasons(), ", ")
		}
		f.HeldFor = q.Reason
	}
	if q.VendorID != "" {
		if uuid.Validate(q.VendorID) != nil || len(q.VendorID) != 36 {
			bad["vendor_id"] = "a vendor id (a UUID)"
		}
		// A UUID's hex digits are case-insensitive; vendor ids are
		// stored in lower case.
		f.VendorID = strings.ToLower(q.VendorID)
	}
	if q.Since != "" {
		t, err := time.Parse(time.RFC3339Nano, q.Since)
		if err != nil {
			bad["since"] = "an RFC 3339 time, such as 2026-03-14T15:09:26Z"
		}
		f.Since = t
	}
	if q.Limit != "" {
		v, ok := parseLimit(q.Limit)
		if !ok {
			bad["limit"] = "a whole number from 1 to 200"
		}
		n = v
	}
	if q.Cursor != "" {
		c, ok := decodeCursor(q.Cursor)
		if !ok {
			bad["cursor"] = "not a cursor this API gave"
		}
		after = c
	}
	if len(bad) > 0 {
		return f, nil, 0, placement.ValidationError(bad)
	}
	return f, after, n, nil
}

// Queue lists every vendor's orders that q selects, newest first: the
// staff's way to find what is held for review, and since when.
func (s *Service) Queue(ctx context.Context, q QueueQuery) (*QueuePage, error) {
	f, after, n, err := q.parse()
	if err != nil {
		return nil, err
	}
	orders, err := s.o.Store.SearchOrders(ctx, f, after, n+1)
	if err != nil {
		return nil, err
	}
	out := &QueuePage{Orders: make([]QueueEntry, 0, len(orders))}
	if len(orders) > n {
		orders = orders[:n]
		next := encodeCursor(orders[n-1])
		out.NextCursor = &next
	}
	for _, o := range orders {
		out.Orders = append(out.Orders, QueueEntry{VendorID: o.VendorID,
			DeadlineAt: o.CreatedAt.Add(s.o.Deadline).Truncate(time.Second), Order: s.View(o)})
	}
	return out, nil
}
