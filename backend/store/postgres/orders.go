package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"vendorgate/backend/store"
	"vendorgate/shared/wire"
)

// ReserveIdempotency inserts rec unless the vendor already used its key.
// The primary key (vendor_id, key) decides a race: the loser's INSERT waits
// for the winner's commit, inserts nothing, and reads the winner's record.
func (s *Store) ReserveIdempotency(ctx context.Context, rec store.Idempotency) (*store.Idempotency, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	// The existing record can be dropped between the INSERT and the SELECT
	// (a placement that failed): then the key is free again; try again.
	for attempt := 0; attempt < 5; attempt++ {
		tag, err := s.pool.Exec(ctx, `INSERT INTO idempotency (vendor_id, key, request_hash, order_id, created_at)
			VALUES ($1, $2, $3, NULL, $4) ON CONFLICT (vendor_id, key) DO NOTHING`,
			rec.VendorID, rec.Key, rec.RequestHash, rec.CreatedAt)
		if err != nil {
			return nil, fmt.Errorf("reserve idempotency key: %w", err)
		}
		if tag.RowsAffected() == 1 {
			return nil, nil
		}
		var e store.Idempotency
		var orderID *string
		err = s.pool.QueryRow(ctx, "SELECT vendor_id, key, request_hash, order_id, created_at FROM idempotency WHERE vendor_id = $1 AND key = $2",
			rec.VendorID, rec.Key).Scan(&e.VendorID, &e.Key, &e.RequestHash, &orderID, &e.CreatedAt)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read idempotency key: %w", err)
		}
		if orderID != nil {
			e.OrderID = *orderID
		}
		e.CreatedAt = utc(e.CreatedAt)
		return &e, nil
	}
	return nil, errors.New("reserve idempotency key: the record kept changing under us")
}

// TakeOverIdempotency replaces abandoned by rec if it is unchanged. The
// UPDATE's row lock decides a race: the loser's UPDATE waits for the
// winner's commit, then finds the row changed and updates nothing.
func (s *Store) TakeOverIdempotency(ctx context.Context, abandoned, rec store.Idempotency) (bool, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	tag, err := s.pool.Exec(ctx, `UPDATE idempotency SET request_hash = $1, created_at = $2
		WHERE vendor_id = $3 AND key = $4 AND order_id IS NULL AND request_hash = $5 AND created_at = $6`,
		rec.RequestHash, rec.CreatedAt, abandoned.VendorID, abandoned.Key, abandoned.RequestHash, abandoned.CreatedAt)
	if err != nil {
		return false, fmt.Errorf("take over idempotency key: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// DropIdempotency removes a record that has no order.
func (s *Store) DropIdempotency(ctx context.Context, vendorID, key string) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	_, err := s.pool.Exec(ctx, "DELETE FROM idempotency WHERE vendor_id = $1 AND key = $2 AND order_id IS NULL", vendorID, key)
	if err != nil {
		return fmt.Errorf("drop idempotency key: %w", err)
	}
	return nil
}

// CreateOrder inserts the order, its services and its idempotency link in
// one transaction, so a failure leaves either all of it or none.
func (s *Store) CreateOrder(ctx context.Context, o *store.Order, idemKey string) error {
	driver, err := json.Marshal(o.Driver)
	if err != nil {
		return err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return s.tx(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO orders (id, vendor_id, environment, mc_number, external_reference, driver,
			created_at, status, final, next_step_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			o.ID, o.VendorID, o.Environment, o.MCNumber, o.ExternalReference, string(driver),
			o.CreatedAt, o.Status, o.Final, o.NextStepAt)
		if err != nil {
			return fmt.Errorf("create order %s: %w", o.ID, err)
		}
		if err := insertServices(ctx, tx, o); err != nil {
			return err
		}
		if idemKey != "" {
			tag, err := tx.Exec(ctx, "UPDATE idempotency SET order_id = $1 WHERE vendor_id = $2 AND key = $3 AND order_id IS NULL",
				o.ID, o.VendorID, idemKey)
			if err != nil {
				return fmt.Errorf("link idempotency key to order %s: %w", o.ID, err)
			}
			if tag.RowsAffected() != 1 {
				return fmt.Errorf("link idempotency key to order %s: no reserved record", o.ID)
			}
		}
		return nil
	})
}

func insertServices(ctx context.Context, tx pgx.Tx, o *store.Order) error {
	for i, sv := range o.Services {
		var result *string
		if sv.Result != nil {
			b, err := json.Marshal(sv.Result)
			if err != nil {
				return err
			}
			r := string(b)
			result = &r
		}
		_, err := tx.Exec(ctx, `INSERT INTO order_services (order_id, position, service, status, reason, state,
			completed_at, report_path, result, steps) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			o.ID, i, sv.Name, sv.Status, sv.Reason, sv.State, sv.CompletedAt, sv.ReportPath, result, sv.Steps)
		if err != nil {
			return fmt.Errorf("save service %s of order %s: %w", sv.Name, o.ID, err)
		}
	}
	return nil
}

func scanOrder(r store.Scanner) (*store.Order, error) {
	var o store.Order
	var driver []byte
	if err := r.Scan(&o.ID, &o.VendorID, &o.Environment, &o.MCNumber, &o.ExternalReference, &driver,
		&o.CreatedAt, &o.Status, &o.Final, &o.NextStepAt); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(driver, &o.Driver); err != nil {
		return nil, fmt.Errorf("order %s driver: %w", o.ID, err)
	}
	o.CreatedAt, o.NextStepAt = utc(o.CreatedAt), utcPtr(o.NextStepAt)
	return &o, nil
}

func scanService(r store.Scanner) (store.Service, error) {
	var sv store.Service
	var result []byte
	if err := r.Scan(&sv.Name, &sv.Status, &sv.Reason, &sv.State, &sv.CompletedAt, &sv.ReportPath, &result, &sv.Steps); err != nil {
		return sv, err
	}
	sv.CompletedAt = utcPtr(sv.CompletedAt)
	if result != nil {
		sv.Result = &wire.ReviewsResult{}
		if err := json.Unmarshal(result, sv.Result); err != nil {
			return sv, fmt.Errorf("result of %s: %w", sv.Name, err)
		}
	}
	return sv, nil
}

// UpdateOrder locks the order's row (SELECT ... FOR UPDATE), lets fn change
// it and saves the order and its services, in one transaction. Concurrent
// updaters, on this replica or another, take turns, and each fn sees what
// the previous one saved. fn's error aborts and is returned.
func (s *Store) UpdateOrder(ctx context.Context, id string, fn func(*store.Order) error) (*store.Order, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var out *store.Order
	err := s.tx(ctx, func(tx pgx.Tx) error {
		o, err := s.OrderIn(ctx, pgDB{tx}, id, true)
		if err != nil {
			return err
		}
		if err := fn(o); err != nil {
			return err
		}
		driver, err := json.Marshal(o.Driver)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE orders SET mc_number = $1, external_reference = $2, driver = $3,
			status = $4, final = $5, next_step_at = $6 WHERE id = $7`,
			o.MCNumber, o.ExternalReference, string(driver), o.Status, o.Final, o.NextStepAt, id)
		if err != nil {
			return fmt.Errorf("update order %s: %w", id, err)
		}
		if _, err := tx.Exec(ctx, "DELETE FROM order_services WHERE order_id = $1", id); err != nil {
			return fmt.Errorf("update order %s: %w", id, err)
		}
		if err := insertServices(ctx, tx, o); err != nil {
			return err
		}
		out = o
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// DueSandboxOrders lists orders whose next sandbox step is due. Two
// replicas may list the same order: UpdateOrder's row lock makes them take
// turns, and the caller's fn finds the step already taken (NextStepAt moved
// on) the second time.
func (s *Store) DueSandboxOrders(ctx context.Context, now time.Time, limit int) ([]string, error) {
	ids, err := s.IDs(ctx, "SELECT id FROM orders WHERE next_step_at IS NOT NULL AND next_step_at <= $1 ORDER BY next_step_at, id LIMIT $2", now, limit)
	if err != nil {
		return nil, fmt.Errorf("due sandbox orders: %w", err)
	}
	return ids, nil
}

// UnfinishedBefore lists orders not final and created before t. As with
// DueSandboxOrders, UpdateOrder's lock and the caller's re-check of Final
// close each order once whichever replica gets there first.
func (s *Store) UnfinishedBefore(ctx context.Context, t time.Time, limit int) ([]string, error) {
	ids, err := s.IDs(ctx, "SELECT id FROM orders WHERE NOT final AND created_at < $1 ORDER BY created_at, id LIMIT $2", t, limit)
	if err != nil {
		return nil, fmt.Errorf("unfinished orders: %w", err)
	}
	return ids, nil
}
