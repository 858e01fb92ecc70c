package vendors

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"vendorgate/backend/store/sqlite"
	"vendorgate/shared/apikey"
)

// TestSeedOnceAcrossReplicas: replicas that seed one empty database at the
// same moment create one vendor between them (the fixed id decides).
func TestSeedOnceAcrossReplicas(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "db.sqlite")
	var services []*Service
	for i := 0; i < 4; i++ {
		st, err := sqlite.Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		signer, err := apikey.NewSigner([]string{"seed-test-key-signing-secret-0123456789"})
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(Options{Store: st, Prefixes: apikey.DefaultPrefixes(), Signer: signer, KeyLifetime: 90 * 24 * time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		services = append(services, s)
	}
	var wg sync.WaitGroup
	created := make([]bool, len(services))
	errs := make([]error, len(services))
	for i, s := range services {
		wg.Add(1)
		go func() {
			defer wg.Done()
			created[i], errs[i] = s.Seed(ctx)
		}()
	}
	wg.Wait()
	n := 0
	for i := range services {
		if errs[i] != nil {
			t.Fatalf("replica %d: %v", i, errs[i])
		}
		if created[i] {
			n++
		}
	}
	vs, err := services[0].o.Store.ListVendors(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 || len(vs) != 1 || vs[0].ID != SeedVendorID {
		t.Fatalf("%d replicas report seeding, %d vendors exist; want one", n, len(vs))
	}
	if again, err := services[1].Seed(ctx); err != nil || again {
		t.Fatalf("seeding a seeded database: %v %v", again, err)
	}
}
