package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"vendorgate/backend/store"
	"vendorgate/shared/wire"
)

// ReserveIdempotency inserts rec unless the vendor already used its key.
func (s *Store) ReserveIdempotency(ctx context.Context, rec store.Idempotency) (*store.Idempotency, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var existing *store.Idempotency
	err := s.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO idempotency (vendor_id, key, request_hash, order_id, created_at)
			VALUES (?, ?, ?, NULL, ?) ON CONFLICT (vendor_id, key) DO NOTHING`,
			rec.VendorID, rec.Key, rec.RequestHash, toNS(rec.CreatedAt))
		if err != nil {
			return fmt.Errorf("reserve idempotency key: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			return nil
		}
		var e store.Idempotency
		var orderID sql.NullString
		var created int64
		err = tx.QueryRowContext(ctx, "SELECT vendor_id, key, request_hash, order_id, created_at FROM idempotency WHERE vendor_id = ? AND key = ?",
			rec.VendorID, rec.Key).Scan(&e.VendorID, &e.Key, &e.RequestHash, &orderID, &created)
		if err != nil {
			return fmt.Errorf("read idempotency key: %w", err)
		}
		e.OrderID, e.CreatedAt = orderID.String, fromNS(created)
		existing = &e
		return nil
	})
	return existing, err
}

// TakeOverIdempotency replaces abandoned by rec if it is unchanged.
func (s *Store) TakeOverIdempotency(ctx context.Context, abandoned, rec store.Idempotency) (bool, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	res, err := s.db.ExecContext(ctx, `UPDATE idempotency SET request_hash = ?, created_at = ?
		WHERE vendor_id = ? AND key = ? AND order_id IS NULL AND request_hash = ? AND created_at = ?`,
		rec.RequestHash, toNS(rec.CreatedAt), abandoned.VendorID, abandoned.Key, abandoned.RequestHash, toNS(abandoned.CreatedAt))
	if err != nil {
		return false, fmt.Errorf("take over idempotency key: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("take over idempotency key: %w", err)
	}
	return n == 1, nil
}

// DropIdempotency removes a record that has no order.
func (s *Store) DropIdempotency(ctx context.Context, vendorID, key string) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	_, err := s.db.ExecContext(ctx, "DELETE FROM idempotency WHERE vendor_id = ? AND key = ? AND order_id IS NULL", vendorID, key)
	if err != nil {
		return fmt.Errorf("drop idempotency key: %w", err)
	}
	return nil
}

// CreateOrder inserts the order, its services and its idempotency link in
// one transaction, so a crash leaves either all of it or none.
func (s *Store) CreateOrder(ctx context.Context, o *store.Order, idemKey string) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return s.tx(ctx, func(tx *sql.Tx) error {
		driver, err := json.Marshal(o.Driver)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO orders (id, vendor_id, environment, mc_number, external_reference, driver,
			created_at, status, final, next_step_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			o.ID, o.VendorID, o.Environment, o.MCNumber, toNullString(o.ExternalReference), string(driver),
			toNS(o.CreatedAt), o.Status, o.Final, toNullNS(o.NextStepAt))
		if err != nil {
			return fmt.Errorf("create order %s: %w", o.ID, err)
		}
		if err := insertServices(ctx, tx, o); err != nil {
			return err
		}
		if idemKey != "" {
			res, err := tx.ExecContext(ctx, "UPDATE idempotency SET order_id = ? WHERE vendor_id = ? AND key = ? AND order_id IS NULL",
				o.ID, o.VendorID, idemKey)
			if err != nil {
				return fmt.Errorf("link idempotency key to order %s: %w", o.ID, err)
			}
			if n, _ := res.RowsAffected(); n != 1 {
				return fmt.Errorf("link idempotency key to order %s: no reserved record", o.ID)
			}
		}
		return nil
	})
}

func insertServices(ctx context.Context, tx *sql.Tx, o *store.Order) error {
	for i, sv := range o.Services {
		var result sql.NullString
		if sv.Result != nil {
			b, err := json.Marshal(sv.Result)
			if err != nil {
				return err
			}
			result = sql.NullString{String: string(b), Valid: true}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO order_services (order_id, position, service, status, reason, state,
			completed_at, report_path, result, steps) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			o.ID, i, sv.Name, sv.Status, toNullString(sv.Reason), toNullString(sv.State), toNullNS(sv.CompletedAt),
			sv.ReportPath, result, sv.Steps)
		if err != nil {
			return fmt.Errorf("save service %s of order %s: %w", sv.Name, o.ID, err)
		}
	}
	return nil
}

func scanOrder(r store.Scanner) (*store.Order, error) {
	var o store.Order
	var ext sql.NullString
	var driver string
	var created int64
	var next sql.NullInt64
	if err := r.Scan(&o.ID, &o.VendorID, &o.Environment, &o.MCNumber, &ext, &driver, &created, &o.Status, &o.Final, &next); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(driver), &o.Driver); err != nil {
		return nil, fmt.Errorf("order %s driver: %w", o.ID, err)
	}
	o.ExternalReference, o.CreatedAt, o.NextStepAt = fromNullString(ext), fromNS(created), fromNullNS(next)
	return &o, nil
}

func scanService(r store.Scanner) (store.Service, error) {
	var sv store.Service
	var reason, state, result sql.NullString
	var completed sql.NullInt64
	if err := r.Scan(&sv.Name, &sv.Status, &reason, &state, &completed, &sv.ReportPath, &result, &sv.Steps); err != nil {
		return sv, err
	}
	sv.Reason, sv.State, sv.CompletedAt = fromNullString(reason), fromNullString(state), fromNullNS(completed)
	if result.Valid {
		sv.Result = &wire.ReviewsResult{}
		if err := json.Unmarshal([]byte(result.String), sv.Result); err != nil {
			return sv, fmt.Errorf("result of %s: %w", sv.Name, err)
		}
	}
	return sv, nil
}

// UpdateOrder loads, changes and saves an order in one transaction.
func (s *Store) UpdateOrder(ctx context.Context, id string, fn func(*store.Order) error) (*store.Order, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var out *store.Order
	err := s.tx(ctx, func(tx *sql.Tx) error {
		o, err := s.OrderIn(ctx, sqlDB{tx}, id, false)
		if err != nil {
			return err
		}
		if err := fn(o); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, "UPDATE orders SET status = ?, final = ?, next_step_at = ? WHERE id = ?",
			o.Status, o.Final, toNullNS(o.NextStepAt), id)
		if err != nil {
			return fmt.Errorf("update order %s: %w", id, err)
		}
		if _, err := tx.ExecContext(ctx, "DELETE FROM order_services WHERE order_id = ?", id); err != nil {
			return fmt.Errorf("update order %s: %w", id, err)
		}
		if err := insertServices(ctx, tx, o); err != nil {
			return err
		}
		out = o
		return nil
	})
	return out, err
}

// DueSandboxOrders lists orders whose next sandbox step is due.
func (s *Store) DueSandboxOrders(ctx context.Context, now time.Time, limit int) ([]string, error) {
	ids, err := s.IDs(ctx, "SELECT id FROM orders WHERE next_step_at IS NOT NULL AND next_step_at <= ? ORDER BY next_step_at LIMIT ?", toNS(now), limit)
	if err != nil {
		return nil, fmt.Errorf("due sandbox orders: %w", err)
	}
	return ids, nil
}

// UnfinishedBefore lists orders not final and created before t.
func (s *Store) UnfinishedBefore(ctx context.Context, t time.Time, limit int) ([]string, error) {
	ids, err := s.IDs(ctx, "SELECT id FROM orders WHERE final = 0 AND created_at < ? ORDER BY created_at LIMIT ?", toNS(t), limit)
	if err != nil {
		return nil, fmt.Errorf("unfinished orders: %w", err)
	}
	return ids, nil
}
