// Package sqlite is the default store: one SQLite file through the pure-Go
// modernc.org/sqlite driver, in WAL mode, with the schema migrations
// embedded in the binary and applied at Open.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"vendorgate/backend/store"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Store is a store.Store on one SQLite file.
type Store struct {
	*store.Common
	db      *sql.DB
	timeout time.Duration
}

var _ store.Store = (*Store)(nil)

// Open opens (creating it and its parent directory when missing) the SQLite
// file at path and applies every migration not applied yet. Every call is
// bounded by store.CallTimeout, as in the PostgreSQL store.
//
// Transactions begin IMMEDIATE so that two writers never both read and then
// fail to upgrade their lock; busy_timeout makes the second one wait.
func Open(ctx context.Context, path string) (*Store, error) {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("create database directory: %w", err)
		}
	}
	q := url.Values{}
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("open database %s: %w", path, err)
	}
	db.SetMaxOpenConns(8)
	db.SetConnMaxIdleTime(time.Minute)
	s := &Store{db: db, timeout: store.CallTimeout}
	s.Common = store.NewCommon(sqlDB{db}, s.commonTx, s.commonRead, s.timeout, dialect)
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var one int
	return s.db.QueryRowContext(ctx, "SELECT 1").Scan(&one)
}

// bound gives a call its deadline.
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.timeout)
}

func (s *Store) migrate(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, name := range names {
		base := filepath.Base(name)
		num, _, _ := strings.Cut(base, "_")
		version, err := strconv.Atoi(num)
		if err != nil {
			return fmt.Errorf("migration %s: name must start with a number", base)
		}
		body, err := migrations.ReadFile(name)
		if err != nil {
			return err
		}
		err = s.tx(ctx, func(tx *sql.Tx) error {
			var n int
			if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM schema_migrations WHERE version = ?", version).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return nil
			}
			if _, err := tx.ExecContext(ctx, string(body)); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)", version, time.Now().UnixNano())
			return err
		})
		if err != nil {
			return fmt.Errorf("apply migration %s: %w", base, err)
		}
	}
	return nil
}

// tx runs fn in one transaction, committing when it returns nil.
func (s *Store) tx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// read runs fn in one read-only transaction: in WAL mode it sees one
// snapshot, so an order row and its service rows always agree.
func (s *Store) read(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("begin read: %w", err)
	}
	defer tx.Rollback()
	return fn(tx)
}

// Times are stored as Unix nanoseconds and read back in UTC. A time past
// what an int64 of nanoseconds holds (after 2262-04-11, before 1678-09-21)
// is the nearest one it holds: UnixNano's answer there is undefined (a
// wrapped value), and a bound such as the queue's since=9999-12-31 then
// compared as a time in 1816. Orders are placed by the clock, far inside.
func toNS(t time.Time) int64 {
	switch {
	case t.After(maxNS):
		return math.MaxInt64
	case t.Before(minNS):
		return math.MinInt64
	}
	return t.UnixNano()
}

// minNS and maxNS are the earliest and latest times of an int64 of Unix
// nanoseconds.
var minNS, maxNS = time.Unix(0, math.MinInt64), time.Unix(0, math.MaxInt64)

func fromNS(ns int64) time.Time { return time.Unix(0, ns).UTC() }

func toNullNS(t *time.Time) sql.NullInt64 {
	if t == nil {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: toNS(*t), Valid: true}
}

func fromNullNS(n sql.NullInt64) *time.Time {
	if !n.Valid {
		return nil
	}
	t := fromNS(n.Int64)
	return &t
}

func toNullString(s *string) sql.NullString {
	if s == nil {
		return sql.NullString{}
	}
	return sql.NullString{String: *s, Valid: true}
}

func fromNullString(n sql.NullString) *string {
	if !n.Valid {
		return nil
	}
	s := n.String
	return &s
}
