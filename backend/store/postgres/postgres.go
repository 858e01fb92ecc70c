// Package postgres is the store for several backend replicas on one
// database: PostgreSQL through pgx's pool, with the schema migrations
// embedded in the binary and applied at Open under an advisory lock, so
// that replicas starting together migrate once.
//
// Replicas agree through the database alone: UpdateOrder and UpdateVendor
// lock the row (SELECT ... FOR UPDATE) so concurrent updaters on any
// replica take turns and each sees the state the previous one saved, and
// the idempotency table's primary key decides which of two placements with
// one Idempotency-Key wins.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"vendorgate/backend/store"
)

//go:embed migrations/*.sql
var migrations embed.FS

// migrationLock is the pg_advisory_xact_lock key every replica takes before
// it looks at the schema ("vendorgate" in ASCII, truncated to fit).
const migrationLock int64 = 0x76656e646f7267

// poolMaxConns bounds the pool unless the URL has a pool_max_conns
// parameter, which is how an operator sets another (docs/configuration.md,
// database): a constant of the package, not an option.
const poolMaxConns = 10

// Options configure Open.
type Options struct {
	// URL is a postgres:// or postgresql:// URL. A pool_max_conns parameter
	// in it wins over poolMaxConns.
	URL string
}

// Store is a store.Store on one PostgreSQL database.
type Store struct {
	*store.Common
	pool    *pgxpool.Pool
	timeout time.Duration
}

var _ store.Store = (*Store)(nil)

// Open connects to the database and applies every migration not applied
// yet.
func Open(ctx context.Context, o Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(o.URL)
	if err != nil {
		// pgx's parse errors may repeat the URL, password included.
		return nil, errors.New("postgres: the database URL does not parse as a postgres:// URL")
	}
	if !strings.Contains(o.URL, "pool_max_conns=") {
		cfg.MaxConns = poolMaxConns
	}
	cfg.MaxConnIdleTime = time.Minute
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	// Every call is bounded by store.CallTimeout, as in the SQLite store.
	s := &Store{pool: pool, timeout: store.CallTimeout}
	s.Common = store.NewCommon(pgDB{pool}, s.commonTx, s.commonRead, s.timeout, dialect)
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the pool.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var one int
	return s.pool.QueryRow(ctx, "SELECT 1").Scan(&one)
}

// bound gives a call its deadline.
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.timeout)
}

// migrate applies the migrations in one transaction that first takes the
// advisory lock: a second replica waits for the first one's commit and then
// finds every version applied.
func (s *Store) migrate(ctx context.Context) error {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	ctx, cancel := context.WithTimeout(ctx, 2*s.timeout)
	defer cancel()
	return s.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrationLock); err != nil {
			return fmt.Errorf("postgres: migration lock: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version integer PRIMARY KEY, applied_at timestamptz NOT NULL)`); err != nil {
			return fmt.Errorf("postgres: create schema_migrations: %w", err)
		}
		for _, name := range names {
			base := path.Base(name)
			num, _, _ := strings.Cut(base, "_")
			version, err := strconv.Atoi(num)
			if err != nil {
				return fmt.Errorf("postgres: migration %s: name must start with a number", base)
			}
			var applied bool
			if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1)", version).Scan(&applied); err != nil {
				return fmt.Errorf("postgres: migration %s: %w", base, err)
			}
			if applied {
				continue
			}
			body, err := migrations.ReadFile(name)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, string(body)); err != nil {
				return fmt.Errorf("postgres: apply migration %s: %w", base, err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version, applied_at) VALUES ($1, now())", version); err != nil {
				return fmt.Errorf("postgres: record migration %s: %w", base, err)
			}
		}
		return nil
	})
}

// tx runs fn in one transaction (READ COMMITTED), committing when it
// returns nil.
func (s *Store) tx(ctx context.Context, fn func(pgx.Tx) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// Times are read back in UTC; PostgreSQL keeps microseconds.
func utc(t time.Time) time.Time { return t.UTC() }

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
