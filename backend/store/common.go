package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// DB is what the queries both stores share need of a database or of one
// of its transactions; each store adapts its driver to it.
type DB interface {
	Exec(ctx context.Context, query string, args ...any) error
	QueryRow(ctx context.Context, query string, args ...any) Scanner
	// Query runs query and hands its rows to read; the rows are closed when
	// read returns.
	Query(ctx context.Context, read func(Rows) error, query string, args ...any) error
}

// Placeholder is how a dialect writes a query's parameters.
type Placeholder int

const (
	// Question marks every parameter ? (SQLite).
	Question Placeholder = iota
	// Dollar numbers them $1, $2, ... (PostgreSQL).
	Dollar
)

// Dialect is what differs between the stores for the shared methods: the placeholders, how a row lock is asked for, how times are
// stored and rows read, and the driver's no-rows error.
type Dialect struct {
	Placeholder Placeholder
	// ForUpdate is appended to the SELECT that UpdateVendor runs in its
	// transaction ("" where the transaction itself excludes other writers).
	ForUpdate string
	// Time and NullTime give a time as the engine stores it.
	Time     func(time.Time) any
	NullTime func(*time.Time) any
	// ScanVendor and ScanKey read a row of VendorCols and of KeyCols.
	ScanVendor func(Scanner) (*Vendor, error)
	ScanKey    func(Scanner) (*Key, error)
	// ScanAudit reads a row of AuditCols.
	ScanAudit func(Scanner) (*AuditRecord, error)
	// ScanBillingEvent reads a row of BillingEventCols.
	ScanBillingEvent func(Scanner) (*BillingEvent, error)
	// ScanOrder reads a row of OrderCols, ScanService one of ServiceCols.
	ScanOrder   func(Scanner) (*Order, error)
	ScanService func(Scanner) (Service, error)
	// NoRows is the driver's error for a row that is not there.
	NoRows error
}

// VendorCols and KeyCols are the columns, in order, that ScanVendor and
// ScanKey read.
const (
	VendorCols = "id, company_name, environment, status, enabled_services, created_at"
	KeyCols    = "id, vendor_id, hash, prefix, environment, created_at, expires_at, revoked_at, rotated_from, replaced_by, revoke_at"
)

// Common implements the methods of Store that are the same on both engines
// (the vendor and key records, the order counts, and reading orders:
// orders.go) and the helpers the stores' own methods share; a store embeds
// it.
type Common struct {
	db      DB
	tx      func(ctx context.Context, fn func(DB) error) error
	read    func(ctx context.Context, fn func(DB) error) error
	timeout time.Duration
	d       Dialect
	q       commonQueries
}

type commonQueries struct {
	createVendor, getVendor, listVendors, lockVendor, updateVendor    string
	createKey, getKey, getKeyByHash, listKeys, revokeKey              string
	lockKey, rotateKey, dueRevocations, expiringKeys, vendorsExpiring string
	orders                                                            orderQueries
}

// NewCommon gives the shared methods over db: tx runs fn in one
// transaction, committing when it returns nil; read runs fn in one
// read-only transaction that sees one snapshot; every call is bounded by
// timeout.
func NewCommon(db DB, tx, read func(ctx context.Context, fn func(DB) error) error, timeout time.Duration, d Dialect) *Common {
	bind := func(q string) string { return Bind(d.Placeholder, q) }
	return &Common{db: db, tx: tx, read: read, timeout: timeout, d: d, q: commonQueries{
		orders:       newOrderQueries(d),
		createVendor: bind("INSERT INTO vendors (" + VendorCols + ") VALUES (?, ?, ?, ?, ?, ?)"),
		getVendor:    bind("SELECT " + VendorCols + " FROM vendors WHERE id = ?"),
		listVendors:  "SELECT " + VendorCols + " FROM vendors ORDER BY created_at, id",
		lockVendor:   bind("SELECT " + VendorCols + " FROM vendors WHERE id = ?" + d.ForUpdate),
		updateVendor: bind("UPDATE vendors SET company_name = ?, status = ?, enabled_services = ? WHERE id = ?"),
		createKey:    bind("INSERT INTO api_keys (" + KeyCols + ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
		getKey:       bind("SELECT " + KeyCols + " FROM api_keys WHERE id = ?"),
		getKeyByHash: bind("SELECT " + KeyCols + " FROM api_keys WHERE hash = ?"),
		listKeys:     bind("SELECT " + KeyCols + " FROM api_keys WHERE vendor_id = ? ORDER BY created_at, id"),
		revokeKey:    bind("UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ? RETURNING " + KeyCols),
		lockKey:      bind("SELECT " + KeyCols + " FROM api_keys WHERE id = ?" + d.ForUpdate),
		rotateKey:    bind("UPDATE api_keys SET replaced_by = ?, revoke_at = ? WHERE id = ?"),
		dueRevocations: bind("SELECT id FROM api_keys WHERE revoke_at IS NOT NULL AND revoke_at <= ? AND revoked_at IS NULL" +
			" ORDER BY revoke_at, id LIMIT ?"),
		expiringKeys: bind("SELECT " + KeyCols + " FROM api_keys WHERE revoked_at IS NULL AND expires_at > ? AND expires_at < ? ORDER BY expires_at, id"),
		vendorsExpiring: bind("SELECT COUNT(*) FROM vendors v WHERE v.status = 'approved' AND v.environment = 'live'" +
			" AND EXISTS (SELECT 1 FROM api_keys k WHERE k.vendor_id = v.id AND k.revoked_at IS NULL)" +
			" AND NOT EXISTS (SELECT 1 FROM api_keys k WHERE k.vendor_id = v.id AND k.revoked_at IS NULL AND k.expires_at > ?)"),
	}}
}

// Bind writes query's ? parameters in the style p; the queries it is given
// hold no ? but their parameters.
func Bind(p Placeholder, query string) string {
	if p == Question {
		return query
	}
	var b strings.Builder
	n := 0
	for _, c := range query {
		if c == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

// ServicesJSON is the stored JSON of a service list; nil is stored as [].
func ServicesJSON(s []string) string {
	if s == nil {
		s = []string{}
	}
	b, _ := json.Marshal(s)
	return string(b)
}

// bound gives a call its deadline.
func (a *Common) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, a.timeout)
}

// notFound wraps err, as ErrNotFound when it is the driver's no-rows error.
func (a *Common) notFound(err error, what, id string) error {
	if errors.Is(err, a.d.NoRows) {
		return fmt.Errorf("%s %s: %w", what, id, ErrNotFound)
	}
	return fmt.Errorf("%s %s: %w", what, id, err)
}

// CreateVendor inserts v.
func (a *Common) CreateVendor(ctx context.Context, v *Vendor) error {
	ctx, cancel := a.bound(ctx)
	defer cancel()
	err := a.db.Exec(ctx, a.q.createVendor,
		v.ID, v.CompanyName, v.Environment, v.Status, ServicesJSON(v.EnabledServices), a.d.Time(v.CreatedAt))
	if err != nil {
		return fmt.Errorf("create vendor %s: %w", v.ID, err)
	}
	return nil
}

// GetVendor returns the vendor with id.
func (a *Common) GetVendor(ctx context.Context, id string) (*Vendor, error) {
	return one(ctx, a, a.d.ScanVendor, "vendor", id, a.q.getVendor, id)
}

// ListVendors lists every vendor, oldest first.
func (a *Common) ListVendors(ctx context.Context) ([]*Vendor, error) {
	out, err := list(ctx, a, a.d.ScanVendor, a.q.listVendors)
	if err != nil {
		return nil, fmt.Errorf("list vendors: %w", err)
	}
	return out, nil
}

// UpdateVendor loads the vendor (locking its row where the dialect asks
// for it), lets fn change it and saves it, in one transaction: concurrent
// updates, on any replica, take turns.
func (a *Common) UpdateVendor(ctx context.Context, id string, fn func(*Vendor) error) (*Vendor, error) {
	ctx, cancel := a.bound(ctx)
	defer cancel()
	var out *Vendor
	err := a.tx(ctx, func(tx DB) error {
		v, err := a.d.ScanVendor(tx.QueryRow(ctx, a.q.lockVendor, id))
		if err != nil {
			return a.notFound(err, "vendor", id)
		}
		if err := fn(v); err != nil {
			return err
		}
		err = tx.Exec(ctx, a.q.updateVendor, v.CompanyName, v.Status, ServicesJSON(v.EnabledServices), id)
		if err != nil {
			return fmt.Errorf("update vendor %s: %w", id, err)
		}
		out = v
		return nil
	})
	return out, err
}

// CreateKey inserts k.
func (a *Common) CreateKey(ctx context.Context, k *Key) error {
	ctx, cancel := a.bound(ctx)
	defer cancel()
	if err := a.createKey(ctx, a.db, k); err != nil {
		return fmt.Errorf("create key %s: %w", k.ID, err)
	}
	return nil
}

func (a *Common) createKey(ctx context.Context, db DB, k *Key) error {
	return db.Exec(ctx, a.q.createKey, k.ID, k.VendorID, k.Hash, k.Prefix, k.Environment,
		a.d.Time(k.CreatedAt), a.d.Time(k.ExpiresAt), a.d.NullTime(k.RevokedAt),
		nullString(k.RotatedFrom), nullString(k.ReplacedBy), a.d.NullTime(k.RevokeAt))
}

// nullString stores "" as NULL.
func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// RotateKey locks the key (where the dialect asks for it; SQLite's
// transaction excludes other writers), lets fn give its successor, inserts
// it and saves the old key's replaced_by and revoke_at, in one transaction.
func (a *Common) RotateKey(ctx context.Context, id string, fn func(old *Key) (*Key, error)) (*Key, *Key, error) {
	ctx, cancel := a.bound(ctx)
	defer cancel()
	var old, next *Key
	err := a.tx(ctx, func(tx DB) error {
		k, err := a.d.ScanKey(tx.QueryRow(ctx, a.q.lockKey, id))
		if err != nil {
			return a.notFound(err, "key", id)
		}
		n, err := fn(k)
		if err != nil {
			return err
		}
		if err := a.createKey(ctx, tx, n); err != nil {
			return fmt.Errorf("create key %s: %w", n.ID, err)
		}
		if err := tx.Exec(ctx, a.q.rotateKey, nullString(k.ReplacedBy), a.d.NullTime(k.RevokeAt), id); err != nil {
			return fmt.Errorf("rotate key %s: %w", id, err)
		}
		old, next = k, n
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return old, next, nil
}

// DueRevocations lists the keys whose scheduled revocation is due.
func (a *Common) DueRevocations(ctx context.Context, now time.Time, limit int) ([]string, error) {
	ids, err := a.IDs(ctx, a.q.dueRevocations, a.d.Time(now), limit)
	if err != nil {
		return nil, fmt.Errorf("due key revocations: %w", err)
	}
	return ids, nil
}

// ExpiringKeys lists every vendor's keys not revoked that expire after
// after and before before.
func (a *Common) ExpiringKeys(ctx context.Context, after, before time.Time) ([]*Key, error) {
	out, err := list(ctx, a, a.d.ScanKey, a.q.expiringKeys, a.d.Time(after), a.d.Time(before))
	if err != nil {
		return nil, fmt.Errorf("expiring keys: %w", err)
	}
	return out, nil
}

// CountVendorsExpiring counts approved live vendors with a key not revoked
// and none that expires after t.
func (a *Common) CountVendorsExpiring(ctx context.Context, t time.Time) (int, error) {
	ctx, cancel := a.bound(ctx)
	defer cancel()
	var n int
	if err := a.db.QueryRow(ctx, a.q.vendorsExpiring, a.d.Time(t)).Scan(&n); err != nil {
		return 0, fmt.Errorf("count vendors whose keys expire: %w", err)
	}
	return n, nil
}

// GetKey returns the key with id.
func (a *Common) GetKey(ctx context.Context, id string) (*Key, error) {
	return one(ctx, a, a.d.ScanKey, "key", id, a.q.getKey, id)
}

// GetKeyByHash returns the key whose hash is hash.
func (a *Common) GetKeyByHash(ctx context.Context, hash string) (*Key, error) {
	return one(ctx, a, a.d.ScanKey, "key with hash", "", a.q.getKeyByHash, hash)
}

// ListKeys lists a vendor's keys, oldest first.
func (a *Common) ListKeys(ctx context.Context, vendorID string) ([]*Key, error) {
	out, err := list(ctx, a, a.d.ScanKey, a.q.listKeys, vendorID)
	if err != nil {
		return nil, fmt.Errorf("list keys of %s: %w", vendorID, err)
	}
	return out, nil
}

// list reads every row query gives, in order, within the call's bound.
func list[T any](ctx context.Context, a *Common, scan func(Scanner) (T, error), query string, args ...any) ([]T, error) {
	ctx, cancel := a.bound(ctx)
	defer cancel()
	var out []T
	err := a.db.Query(ctx, func(rows Rows) (err error) {
		out, err = Collect(rows, scan)
		return err
	}, query, args...)
	return out, err
}

// RevokeKey sets revoked_at once, in one statement: revoking twice, on any
// replica, keeps the first time.
func (a *Common) RevokeKey(ctx context.Context, id string, at time.Time) (*Key, error) {
	return one(ctx, a, a.d.ScanKey, "key", id, a.q.revokeKey, a.d.Time(at), id)
}

// one reads the row query gives within the call's bound; no row is
// ErrNotFound, named by what and id.
func one[T any](ctx context.Context, a *Common, scan func(Scanner) (T, error), what, id, query string, args ...any) (T, error) {
	ctx, cancel := a.bound(ctx)
	defer cancel()
	v, err := scan(a.db.QueryRow(ctx, query, args...))
	if err != nil {
		var zero T
		return zero, a.notFound(err, what, id)
	}
	return v, nil
}

// IDs runs query, which selects one text column, within the call's bound
// and returns its values in order.
func (a *Common) IDs(ctx context.Context, query string, args ...any) ([]string, error) {
	return list(ctx, a, ScanString, query, args...)
}

// CountOrdersByStatus counts every order by status.
func (a *Common) CountOrdersByStatus(ctx context.Context) (map[string]int, error) {
	ctx, cancel := a.bound(ctx)
	defer cancel()
	out := map[string]int{}
	err := a.db.Query(ctx, func(rows Rows) error {
		for rows.Next() {
			var st string
			var n int
			if err := rows.Scan(&st, &n); err != nil {
				return err
			}
			out[st] = n
		}
		return rows.Err()
	}, "SELECT status, COUNT(*) FROM orders GROUP BY status")
	if err != nil {
		return nil, fmt.Errorf("count orders: %w", err)
	}
	return out, nil
}
