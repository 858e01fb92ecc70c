package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"vendorgate/backend/store"
)

// dialect is SQLite's for the vendor, key and order methods store.Common
// shares: times as Unix nanoseconds, the IMMEDIATE transaction as the
// vendor's lock.
var dialect = store.Dialect{
	Placeholder:      store.Question,
	Time:             func(t time.Time) any { return toNS(t) },
	NullTime:         func(t *time.Time) any { return toNullNS(t) },
	ScanVendor:       scanVendor,
	ScanKey:          scanKey,
	ScanAudit:        scanAudit,
	ScanBillingEvent: scanBillingEvent,
	ScanOrder:        scanOrder,
	ScanService:      scanService,
	NoRows:           sql.ErrNoRows,
}

func scanVendor(r store.Scanner) (*store.Vendor, error) {
	var v store.Vendor
	var services string
	var created int64
	if err := r.Scan(&v.ID, &v.CompanyName, &v.Environment, &v.Status, &services, &created); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(services), &v.EnabledServices); err != nil {
		return nil, fmt.Errorf("vendor %s services: %w", v.ID, err)
	}
	if v.EnabledServices == nil {
		v.EnabledServices = []string{}
	}
	v.CreatedAt = fromNS(created)
	return &v, nil
}

func scanKey(r store.Scanner) (*store.Key, error) {
	var k store.Key
	var created, expires int64
	var revoked, revokeAt sql.NullInt64
	var from, by sql.NullString
	if err := r.Scan(&k.ID, &k.VendorID, &k.Hash, &k.Prefix, &k.Environment, &created, &expires, &revoked, &from, &by, &revokeAt); err != nil {
		return nil, err
	}
	k.CreatedAt, k.ExpiresAt, k.RevokedAt = fromNS(created), fromNS(expires), fromNullNS(revoked)
	k.RotatedFrom, k.ReplacedBy, k.RevokeAt = from.String, by.String, fromNullNS(revokeAt)
	return &k, nil
}

func scanAudit(r store.Scanner) (*store.AuditRecord, error) {
	var a store.AuditRecord
	var at int64
	if err := r.Scan(&a.ID, &at, &a.Actor, &a.Action, &a.VendorID, &a.KeyID, &a.OrderID, &a.Service, &a.Address, &a.RequestID); err != nil {
		return nil, err
	}
	a.At = fromNS(at)
	return &a, nil
}

// sqlDB adapts a *sql.DB or a *sql.Tx to store.DB.
type sqlDB struct {
	q interface {
		ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error)
		QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
		QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
	}
}

func (d sqlDB) Exec(ctx context.Context, q string, args ...any) error {
	_, err := d.q.ExecContext(ctx, q, args...)
	return err
}

func (d sqlDB) QueryRow(ctx context.Context, q string, args ...any) store.Scanner {
	return d.q.QueryRowContext(ctx, q, args...)
}

func (d sqlDB) Query(ctx context.Context, read func(store.Rows) error, q string, args ...any) error {
	rows, err := d.q.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	return read(rows)
}

// commonTx is tx for store.Common.
func (s *Store) commonTx(ctx context.Context, fn func(store.DB) error) error {
	return s.tx(ctx, func(tx *sql.Tx) error { return fn(sqlDB{tx}) })
}

func scanBillingEvent(r store.Scanner) (*store.BillingEvent, error) {
	var e store.BillingEvent
	var at int64
	if err := r.Scan(&e.ID, &e.VendorID, &e.OrderID, &e.Service, &e.Environment, &e.Outcome, &at, &e.Attempts); err != nil {
		return nil, err
	}
	e.At = fromNS(at)
	return &e, nil
}

// commonRead is read for store.Common.
func (s *Store) commonRead(ctx context.Context, fn func(store.DB) error) error {
	return s.read(ctx, func(tx *sql.Tx) error { return fn(sqlDB{tx}) })
}
