package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"vendorgate/backend/store"
)

const vendorCols = "id, company_name, environment, status, enabled_services, created_at"

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

func servicesJSON(s []string) string {
	if s == nil {
		s = []string{}
	}
	b, _ := json.Marshal(s)
	return string(b)
}

// CreateVendor inserts v.
func (s *Store) CreateVendor(ctx context.Context, v *store.Vendor) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	_, err := s.db.ExecContext(ctx, "INSERT INTO vendors ("+vendorCols+") VALUES (?, ?, ?, ?, ?, ?)",
		v.ID, v.CompanyName, v.Environment, v.Status, servicesJSON(v.EnabledServices), toNS(v.CreatedAt))
	if err != nil {
		return fmt.Errorf("create vendor %s: %w", v.ID, err)
	}
	return nil
}

// GetVendor returns the vendor with id.
func (s *Store) GetVendor(ctx context.Context, id string) (*store.Vendor, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	v, err := scanVendor(s.db.QueryRowContext(ctx, "SELECT "+vendorCols+" FROM vendors WHERE id = ?", id))
	if err != nil {
		return nil, notFound(err, "vendor", id)
	}
	return v, nil
}

// ListVendors lists every vendor, oldest first.
func (s *Store) ListVendors(ctx context.Context) ([]*store.Vendor, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.db.QueryContext(ctx, "SELECT "+vendorCols+" FROM vendors ORDER BY created_at, id")
	if err != nil {
		return nil, fmt.Errorf("list vendors: %w", err)
	}
	defer rows.Close()
	out, err := store.Collect(rows, scanVendor)
	if err != nil {
		return nil, fmt.Errorf("list vendors: %w", err)
	}
	return out, nil
}

// UpdateVendor loads, changes and saves a vendor in one transaction.
func (s *Store) UpdateVendor(ctx context.Context, id string, fn func(*store.Vendor) error) (*store.Vendor, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var out *store.Vendor
	err := s.tx(ctx, func(tx *sql.Tx) error {
		v, err := scanVendor(tx.QueryRowContext(ctx, "SELECT "+vendorCols+" FROM vendors WHERE id = ?", id))
		if err != nil {
			return notFound(err, "vendor", id)
		}
		if err := fn(v); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, "UPDATE vendors SET company_name = ?, status = ?, enabled_services = ? WHERE id = ?",
			v.CompanyName, v.Status, servicesJSON(v.EnabledServices), id)
		if err != nil {
			return fmt.Errorf("update vendor %s: %w", id, err)
		}
		out = v
		return nil
	})
	return out, err
}

const keyCols = "id, vendor_id, hash, prefix, environment, created_at, expires_at, revoked_at"

func scanKey(r store.Scanner) (*store.Key, error) {
	var k store.Key
	var created, expires int64
	var revoked sql.NullInt64
	if err := r.Scan(&k.ID, &k.VendorID, &k.Hash, &k.Prefix, &k.Environment, &created, &expires, &revoked); err != nil {
		return nil, err
	}
	k.CreatedAt, k.ExpiresAt, k.RevokedAt = fromNS(created), fromNS(expires), fromNullNS(revoked)
	return &k, nil
}

// CreateKey inserts k.
func (s *Store) CreateKey(ctx context.Context, k *store.Key) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	_, err := s.db.ExecContext(ctx, "INSERT INTO api_keys ("+keyCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
		k.ID, k.VendorID, k.Hash, k.Prefix, k.Environment, toNS(k.CreatedAt), toNS(k.ExpiresAt), toNullNS(k.RevokedAt))
	if err != nil {
		return fmt.Errorf("create key %s: %w", k.ID, err)
	}
	return nil
}

// GetKey returns the key with id.
func (s *Store) GetKey(ctx context.Context, id string) (*store.Key, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	k, err := scanKey(s.db.QueryRowContext(ctx, "SELECT "+keyCols+" FROM api_keys WHERE id = ?", id))
	if err != nil {
		return nil, notFound(err, "key", id)
	}
	return k, nil
}

// GetKeyByHash returns the key whose hash is hash.
func (s *Store) GetKeyByHash(ctx context.Context, hash string) (*store.Key, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	k, err := scanKey(s.db.QueryRowContext(ctx, "SELECT "+keyCols+" FROM api_keys WHERE hash = ?", hash))
	if err != nil {
		return nil, notFound(err, "key with hash", "")
	}
	return k, nil
}

// ListKeys lists a vendor's keys, oldest first.
func (s *Store) ListKeys(ctx context.Context, vendorID string) ([]*store.Key, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.db.QueryContext(ctx, "SELECT "+keyCols+" FROM api_keys WHERE vendor_id = ? ORDER BY created_at, id", vendorID)
	if err != nil {
		return nil, fmt.Errorf("list keys of %s: %w", vendorID, err)
	}
	defer rows.Close()
	out, err := store.Collect(rows, scanKey)
	if err != nil {
		return nil, fmt.Errorf("list keys of %s: %w", vendorID, err)
	}
	return out, nil
}

// RevokeKey sets revoked_at once, in one statement: revoking twice keeps
// the first time.
func (s *Store) RevokeKey(ctx context.Context, id string, at time.Time) (*store.Key, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	k, err := scanKey(s.db.QueryRowContext(ctx, "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ? RETURNING "+keyCols, toNS(at), id))
	if err != nil {
		return nil, notFound(err, "key", id)
	}
	return k, nil
}
