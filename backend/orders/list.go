package orders

import (
	"context"
	"encoding/base64"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"vendorgate/backend/store"
	"vendorgate/shared/wire"
)

// List limits: the default page and the largest.
const (
	DefaultListLimit = 50
	MaxListLimit     = 200
)

// encodeCursor makes the opaque cursor after o: base64url of its creation
// time and id, so a page boundary stays put when newer orders arrive.
func encodeCursor(o *store.Order) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(o.CreatedAt.UnixNano(), 10) + ":" + o.ID))
}

func decodeCursor(s string) (*store.Cursor, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, false
	}
	ns, id, ok := strings.Cut(string(raw), ":")
	if !ok || uuid.Validate(id) != nil {
		return nil, false
	}
	n, err := strconv.ParseInt(ns, 10, 64)
	if err != nil {
		return nil, false
	}
	return &store.Cursor{CreatedAt: time.Unix(0, n).UTC(), OrderID: id}, true
}

// parseLimit reads a list's limit: decimal digits only (strconv.Atoi also
// takes a sign, "+5"), from 1 to MaxListLimit.
func parseLimit(s string) (int, bool) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, false
	}
	v, err := strconv.Atoi(s)
	return v, err == nil && v >= 1 && v <= MaxListLimit
}

// List returns a page of the vendor's orders, newest first. limit and
// cursor are the raw query values ("" when absent).
func (s *Service) List(ctx context.Context, vendorID, limit, cursor string) (*wire.OrderList, error) {
	n := DefaultListLimit
	if limit != "" {
		v, ok := parseLimit(limit)
		if !ok {
			return nil, fieldError("limit", "a whole number from 1 to 200")
		}
		n = v
	}
	var after *store.Cursor
	if cursor != "" {
		c, ok := decodeCursor(cursor)
		if !ok {
			return nil, fieldError("cursor", "not a cursor this API gave")
		}
		after = c
	}
	orders, err := s.o.Store.ListOrders(ctx, vendorID, after, n+1)
	if err != nil {
		return nil, err
	}
	out := &wire.OrderList{Orders: make([]wire.Order, 0, len(orders))}
	if len(orders) > n {
		orders = orders[:n]
		next := encodeCursor(orders[n-1])
		out.NextCursor = &next
	}
	for _, o := range orders {
		out.Orders = append(out.Orders, s.View(o))
	}
	return out, nil
}
