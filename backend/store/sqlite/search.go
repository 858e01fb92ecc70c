package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"vendorgate/backend/store"
)

// SearchOrders lists the orders f keeps, every vendor's, newest first.
func (s *Store) SearchOrders(ctx context.Context, f store.OrderFilter, after *store.Cursor, limit int) ([]*store.Order, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	where, args := store.SearchWhere(f, after, func(t time.Time) any { return toNS(t) })
	q := "SELECT " + orderCols + " FROM orders" + where + " ORDER BY created_at DESC, id DESC LIMIT ?"
	args = append(args, limit)
	var out []*store.Order
	err := s.read(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		out, err = store.Collect(rows, scanOrder)
		rows.Close()
		if err != nil {
			return err
		}
		for _, o := range out {
			if err := loadServices(ctx, tx, o); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("search orders: %w", err)
	}
	return out, nil
}
