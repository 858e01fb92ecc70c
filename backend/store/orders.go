package store

import (
	"context"
	"fmt"
)

// OrderCols are the columns, in order, that a dialect's ScanOrder reads;
// ServiceCols those its ScanService reads.
const (
	OrderCols   = "id, vendor_id, environment, mc_number, external_reference, driver, created_at, status, final, next_step_at"
	ServiceCols = "service, status, reason, state, completed_at, report_path, result, steps"
)

type orderQueries struct {
	getOrder, lockOrder, services, listOrders, listOrdersAfter string
}

func newOrderQueries(d Dialect) orderQueries {
	bind := func(q string) string { return Bind(d.Placeholder, q) }
	const list = "SELECT " + OrderCols + " FROM orders WHERE vendor_id = ?"
	return orderQueries{
		getOrder:        bind("SELECT " + OrderCols + " FROM orders WHERE id = ?"),
		lockOrder:       bind("SELECT " + OrderCols + " FROM orders WHERE id = ?" + d.ForUpdate),
		services:        bind("SELECT " + ServiceCols + " FROM order_services WHERE order_id = ? ORDER BY position"),
		listOrders:      bind(list + " ORDER BY created_at DESC, id DESC LIMIT ?"),
		listOrdersAfter: bind(list + " AND (created_at, id) < (?, ?) ORDER BY created_at DESC, id DESC LIMIT ?"),
	}
}

// OrderIn reads the order with id and its services through db (a
// transaction of the caller's); lock adds the dialect's ForUpdate, so that
// the caller holds the order's row until it commits.
func (a *Common) OrderIn(ctx context.Context, db DB, id string, lock bool) (*Order, error) {
	q := a.q.orders.getOrder
	if lock {
		q = a.q.orders.lockOrder
	}
	o, err := a.d.ScanOrder(db.QueryRow(ctx, q, id))
	if err != nil {
		return nil, a.notFound(err, "order", id)
	}
	if err := a.loadServices(ctx, db, o); err != nil {
		return nil, err
	}
	return o, nil
}

// loadServices reads o's services, in order, into o.Services.
func (a *Common) loadServices(ctx context.Context, db DB, o *Order) error {
	o.Services = o.Services[:0]
	err := db.Query(ctx, func(rows Rows) error {
		for rows.Next() {
			sv, err := a.d.ScanService(rows)
			if err != nil {
				return err
			}
			o.Services = append(o.Services, sv)
		}
		return rows.Err()
	}, a.q.orders.services, o.ID)
	if err != nil {
		return fmt.Errorf("services of order %s: %w", o.ID, err)
	}
	return nil
}

// GetOrder returns the order with id and its services, read in one
// snapshot (the order row and its services agree).
func (a *Common) GetOrder(ctx context.Context, id string) (*Order, error) {
	ctx, cancel := a.bound(ctx)
	defer cancel()
	var out *Order
	err := a.read(ctx, func(db DB) error {
		o, err := a.OrderIn(ctx, db, id, false)
		out = o
		return err
	})
	return out, err
}

// ListOrders lists a vendor's orders, newest first, after the cursor, in
// one snapshot.
func (a *Common) ListOrders(ctx context.Context, vendorID string, after *Cursor, limit int) ([]*Order, error) {
	q, args := a.q.orders.listOrders, []any{vendorID, limit}
	if after != nil {
		q, args = a.q.orders.listOrdersAfter, []any{vendorID, a.d.Time(after.CreatedAt), after.OrderID, limit}
	}
	out, err := a.orders(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list orders of %s: %w", vendorID, err)
	}
	return out, nil
}

// SearchOrders lists the orders f keeps, every vendor's, newest first,
// after the cursor, in one snapshot.
func (a *Common) SearchOrders(ctx context.Context, f OrderFilter, after *Cursor, limit int) ([]*Order, error) {
	where, args := SearchWhere(f, after, a.d.Time)
	q := Bind(a.d.Placeholder, "SELECT "+OrderCols+" FROM orders"+where+" ORDER BY created_at DESC, id DESC LIMIT ?")
	out, err := a.orders(ctx, q, append(args, limit)...)
	if err != nil {
		return nil, fmt.Errorf("search orders: %w", err)
	}
	return out, nil
}

// orders reads the orders query selects (OrderCols) and their services in
// one snapshot, within the call's bound.
func (a *Common) orders(ctx context.Context, query string, args ...any) ([]*Order, error) {
	ctx, cancel := a.bound(ctx)
	defer cancel()
	var out []*Order
	err := a.read(ctx, func(db DB) error {
		err := db.Query(ctx, func(rows Rows) (err error) {
			out, err = Collect(rows, a.d.ScanOrder)
			return err
		}, query, args...)
		if err != nil {
			return err
		}
		for _, o := range out {
			if err := a.loadServices(ctx, db, o); err != nil {
				return err
			}
		}
		return nil
	})
	return out, err
}
