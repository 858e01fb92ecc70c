package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"vendorgate/backend/store"
	"vendorgate/backend/store/sqlite"
	"vendorgate/backend/store/storetest"
)

// TestSuite runs the engine-neutral store suite on SQLite, each test on
// its own file.
func TestSuite(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "suite.db"))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
