package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"vendorgate/backend/store"
)

// SearchOrders lists the orders f keeps, every vendor's, newest first, in
// one snapshot (an order row and its services agree).
func (s *Store) SearchOrders(ctx context.Context, f store.OrderFilter, after *store.Cursor, limit int) ([]*store.Order, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	where, args := store.SearchWhere(f, after, func(t time.Time) any { return t })
	q := store.Bind(store.Dollar, "SELECT "+orderCols+" FROM orders"+where+" ORDER BY created_at DESC, id DESC LIMIT ?")
	args = append(args, limit)
	var out []*store.Order
	err := s.readTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, q, args...)
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
