package backend

import (
	"context"
	"fmt"

	"vendorgate/backend/store"
	"vendorgate/backend/store/postgres"
	"vendorgate/backend/store/sqlite"
	"vendorgate/config"
)

// openStore opens the database c names, the one place the store is
// chosen: a postgres:// URL opens the PostgreSQL store (several replicas
// may share it), anything else is a SQLite file (its directory created
// when missing). Either applies its migrations.
func openStore(ctx context.Context, c *config.Backend) (store.Store, error) {
	if c.IsPostgres() {
		st, err := postgres.Open(ctx, postgres.Options{URL: c.Database})
		if err != nil {
			return nil, fmt.Errorf("open the PostgreSQL database %s: %w", config.RedactURL(c.Database), err)
		}
		return st, nil
	}
	return sqlite.Open(ctx, c.Database)
}
