package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"vendorgate/backend/store"
)

// dialect is PostgreSQL's for the vendor, key and order methods
// store.Common shares: numbered placeholders, timestamptz, and UpdateVendor locks the
// vendor's row so that concurrent updates on any replica take turns.
var dialect = store.Dialect{
	Placeholder:      store.Dollar,
	ForUpdate:        " FOR UPDATE",
	Time:             func(t time.Time) any { return t },
	NullTime:         func(t *time.Time) any { return t },
	ScanVendor:       scanVendor,
	ScanKey:          scanKey,
	ScanAudit:        scanAudit,
	ScanBillingEvent: scanBillingEvent,
	ScanOrder:        scanOrder,
	ScanService:      scanService,
	NoRows:           pgx.ErrNoRows,
}

func scanVendor(r store.Scanner) (*store.Vendor, error) {
	var v store.Vendor
	var services []byte
	if err := r.Scan(&v.ID, &v.CompanyName, &v.Environment, &v.Status, &services, &v.CreatedAt); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(services, &v.EnabledServices); err != nil {
		return nil, fmt.Errorf("vendor %s services: %w", v.ID, err)
	}
	if v.EnabledServices == nil {
		v.EnabledServices = []string{}
	}
	v.CreatedAt = utc(v.CreatedAt)
	return &v, nil
}

func scanKey(r store.Scanner) (*store.Key, error) {
	var k store.Key
	var from, by *string
	if err := r.Scan(&k.ID, &k.VendorID, &k.Hash, &k.Prefix, &k.Environment, &k.CreatedAt, &k.ExpiresAt, &k.RevokedAt, &from, &by, &k.RevokeAt); err != nil {
		return nil, err
	}
	k.CreatedAt, k.ExpiresAt, k.RevokedAt, k.RevokeAt = utc(k.CreatedAt), utc(k.ExpiresAt), utcPtr(k.RevokedAt), utcPtr(k.RevokeAt)
	if from != nil {
		k.RotatedFrom = *from
	}
	if by != nil {
		k.ReplacedBy = *by
	}
	return &k, nil
}

func scanAudit(r store.Scanner) (*store.AuditRecord, error) {
	var a store.AuditRecord
	if err := r.Scan(&a.ID, &a.At, &a.Actor, &a.Action, &a.VendorID, &a.KeyID, &a.OrderID, &a.Service, &a.Address, &a.RequestID); err != nil {
		return nil, err
	}
	a.At = utc(a.At)
	return &a, nil
}

// pgDB adapts the pool or a transaction to store.DB.
type pgDB struct {
	q interface {
		Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
		Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
		QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	}
}

func (d pgDB) Exec(ctx context.Context, q string, args ...any) error {
	_, err := d.q.Exec(ctx, q, args...)
	return err
}

func (d pgDB) QueryRow(ctx context.Context, q string, args ...any) store.Scanner {
	return d.q.QueryRow(ctx, q, args...)
}

func (d pgDB) Query(ctx context.Context, read func(store.Rows) error, q string, args ...any) error {
	rows, err := d.q.Query(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	return read(rows)
}

// commonTx is tx for store.Common.
func (s *Store) commonTx(ctx context.Context, fn func(store.DB) error) error {
	return s.tx(ctx, func(tx pgx.Tx) error { return fn(pgDB{tx}) })
}

func scanBillingEvent(r store.Scanner) (*store.BillingEvent, error) {
	var e store.BillingEvent
	if err := r.Scan(&e.ID, &e.VendorID, &e.OrderID, &e.Service, &e.Environment, &e.Outcome, &e.At, &e.Attempts); err != nil {
		return nil, err
	}
	e.At = utc(e.At)
	return &e, nil
}

// commonRead is store.Common's read: a read-only REPEATABLE READ
// transaction, one snapshot for every statement, never blocking a writer.
func (s *Store) commonRead(ctx context.Context, fn func(store.DB) error) error {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	return fn(pgDB{tx})
}
