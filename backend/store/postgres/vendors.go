package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"vendorgate/backend/store"
)

const vendorCols = "id, company_name, environment, status, enabled_services, created_at"

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

// servicesJSON is the jsonb of a service list; nil is stored as [].
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
	_, err := s.pool.Exec(ctx, "INSERT INTO vendors ("+vendorCols+") VALUES ($1, $2, $3, $4, $5, $6)",
		v.ID, v.CompanyName, v.Environment, v.Status, servicesJSON(v.EnabledServices), v.CreatedAt)
	if err != nil {
		return fmt.Errorf("create vendor %s: %w", v.ID, err)
	}
	return nil
}

// GetVendor returns the vendor with id.
func (s *Store) GetVendor(ctx context.Context, id string) (*store.Vendor, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	v, err := scanVendor(s.pool.QueryRow(ctx, "SELECT "+vendorCols+" FROM vendors WHERE id = $1", id))
	if err != nil {
		return nil, notFound(err, "vendor", id)
	}
	return v, nil
}

// ListVendors lists every vendor, oldest first.
func (s *Store) ListVendors(ctx context.Context) ([]*store.Vendor, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, "SELECT "+vendorCols+" FROM vendors ORDER BY created_at, id")
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

// UpdateVendor locks the vendor's row, lets fn change it and saves it, in
// one transaction: concurrent updates on any replica take turns.
func (s *Store) UpdateVendor(ctx context.Context, id string, fn func(*store.Vendor) error) (*store.Vendor, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var out *store.Vendor
	err := s.tx(ctx, func(tx pgx.Tx) error {
		v, err := scanVendor(tx.QueryRow(ctx, "SELECT "+vendorCols+" FROM vendors WHERE id = $1 FOR UPDATE", id))
		if err != nil {
			return notFound(err, "vendor", id)
		}
		if err := fn(v); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "UPDATE vendors SET company_name = $1, status = $2, enabled_services = $3 WHERE id = $4",
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
	if err := r.Scan(&k.ID, &k.VendorID, &k.Hash, &k.Prefix, &k.Environment, &k.CreatedAt, &k.ExpiresAt, &k.RevokedAt); err != nil {
		return nil, err
	}
	k.CreatedAt, k.ExpiresAt, k.RevokedAt = utc(k.CreatedAt), utc(k.ExpiresAt), utcPtr(k.RevokedAt)
	return &k, nil
}

// CreateKey inserts k.
func (s *Store) CreateKey(ctx context.Context, k *store.Key) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	_, err := s.pool.Exec(ctx, "INSERT INTO api_keys ("+keyCols+") VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
		k.ID, k.VendorID, k.Hash, k.Prefix, k.Environment, k.CreatedAt, k.ExpiresAt, k.RevokedAt)
	if err != nil {
		return fmt.Errorf("create key %s: %w", k.ID, err)
	}
	return nil
}

// GetKey returns the key with id.
func (s *Store) GetKey(ctx context.Context, id string) (*store.Key, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	k, err := scanKey(s.pool.QueryRow(ctx, "SELECT "+keyCols+" FROM api_keys WHERE id = $1", id))
	if err != nil {
		return nil, notFound(err, "key", id)
	}
	return k, nil
}

// GetKeyByHash returns the key whose hash is hash.
func (s *Store) GetKeyByHash(ctx context.Context, hash string) (*store.Key, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	k, err := scanKey(s.pool.QueryRow(ctx, "SELECT "+keyCols+" FROM api_keys WHERE hash = $1", hash))
	if err != nil {
		return nil, notFound(err, "key with hash", "")
	}
	return k, nil
}

// ListKeys lists a vendor's keys, oldest first.
func (s *Store) ListKeys(ctx context.Context, vendorID string) ([]*store.Key, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, "SELECT "+keyCols+" FROM api_keys WHERE vendor_id = $1 ORDER BY created_at, id", vendorID)
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

// RevokeKey sets revoked_at once, in one statement: revoking twice, on any
// replica, keeps the first time.
func (s *Store) RevokeKey(ctx context.Context, id string, at time.Time) (*store.Key, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	k, err := scanKey(s.pool.QueryRow(ctx, "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, $1) WHERE id = $2 RETURNING "+keyCols, at, id))
	if err != nil {
		return nil, notFound(err, "key", id)
	}
	return k, nil
}
