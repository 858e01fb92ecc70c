package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"vendorgate/backend/store"
	"vendorgate/backend/store/storetest"
	"vendorgate/shared/testpg"
	"vendorgate/shared/wire"
)

// TestPostgres starts one private PostgreSQL server for the package and
// runs, each on its own database: the engine-neutral store suite, then what
// only a shared server has (replicas migrating at once, two pools on one
// database taking turns).
func TestPostgres(t *testing.T) {
	srv := testpg.Start(t)
	var mu sync.Mutex
	var n atomic.Int64
	newDB := func(t *testing.T) string {
		// createdb one at a time: concurrent CREATE DATABASE may trip on
		// the template being in use.
		mu.Lock()
		defer mu.Unlock()
		return srv.CreateDB(t, fmt.Sprintf("t%d", n.Add(1)))
	}
	open := func(t *testing.T, url string) *Store {
		t.Helper()
		s, err := Open(context.Background(), Options{URL: url})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	t.Run("Suite", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) store.Store {
			s, err := Open(context.Background(), Options{URL: newDB(t)})
			if err != nil {
				t.Fatal(err)
			}
			return s
		})
	})
	t.Run("MigrateConcurrently", func(t *testing.T) {
		t.Parallel()
		testMigrateConcurrently(t, newDB(t))
	})
	t.Run("PoolBounded", func(t *testing.T) {
		t.Parallel()
		url := newDB(t)
		if got := open(t, url).pool.Config().MaxConns; got != 10 {
			t.Errorf("default pool size %d, want 10", got)
		}
		if got := open(t, url+"&pool_max_conns=3").pool.Config().MaxConns; got != 3 {
			t.Errorf("pool_max_conns=3 gave a pool of %d", got)
		}
	})
	t.Run("BadURLHidesPassword", func(t *testing.T) {
		t.Parallel()
		_, err := Open(context.Background(), Options{URL: "postgres://u:s3cretpw@127.0.0.1:%zz/db"})
		if err == nil {
			t.Fatal("a malformed URL opened")
		}
		if strings.Contains(err.Error(), "s3cretpw") {
			t.Errorf("error repeats the password: %v", err)
		}
	})
	t.Run("UnreachableFails", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := Open(ctx, Options{URL: "postgres://vendorgate@127.0.0.1:1/none?sslmode=disable&connect_timeout=2"}); err == nil {
			t.Fatal("opened a database on a closed port")
		}
	})
	t.Run("AuditRecordsRefuseUpdate", func(t *testing.T) {
		t.Parallel()
		testAuditRefusesUpdate(t, open(t, newDB(t)))
	})
	t.Run("TwoReplicasTakeTurns", func(t *testing.T) {
		t.Parallel()
		url := newDB(t)
		testTwoReplicas(t, open(t, url), open(t, url))
	})
}

// testMigrateConcurrently: several replicas starting at the same moment on
// an empty database all start, and the schema is applied once.
func testMigrateConcurrently(t *testing.T, url string) {
	const replicas = 6
	start := make(chan struct{})
	errs := make(chan error, replicas)
	stores := make(chan *Store, replicas)
	var wg sync.WaitGroup
	for range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			s, err := Open(context.Background(), Options{URL: url})
			if err != nil {
				errs <- err
				return
			}
			stores <- s
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	close(stores)
	for err := range errs {
		t.Errorf("a replica did not start: %v", err)
	}
	var one *Store
	for s := range stores {
		t.Cleanup(func() { _ = s.Close() })
		one = s
	}
	if one == nil {
		t.Fatal("no replica started")
	}
	var rows, versions int
	if err := one.pool.QueryRow(context.Background(), "SELECT COUNT(*), COUNT(DISTINCT version) FROM schema_migrations").Scan(&rows, &versions); err != nil {
		t.Fatal(err)
	}
	names, _ := migrations.ReadDir("migrations")
	if rows != len(names) || versions != len(names) {
		t.Errorf("schema_migrations has %d rows (%d versions), want one per migration (%d)", rows, versions, len(names))
	}
	// A later start finds everything applied.
	s, err := Open(context.Background(), Options{URL: url})
	if err != nil {
		t.Fatalf("restart on a migrated database: %v", err)
	}
	s.Close()
}

// testTwoReplicas: two pools on one database behave as one store. Both run
// the sandbox simulator's loop (list due orders, step each one inside
// UpdateOrder after re-checking it is still due) at the same time: every
// order is stepped exactly once. And updaters on both pools lose nothing.
func testTwoReplicas(t *testing.T, a, b *Store) {
	ctx := context.Background()
	v := &store.Vendor{ID: uuid.NewString(), CompanyName: "Acme", Environment: "sandbox", Status: wire.VendorApproved,
		EnabledServices: []string{wire.MVR}, CreatedAt: time.Now()}
	if err := a.CreateVendor(ctx, v); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	const orders = 60
	for i := range orders {
		o := &store.Order{ID: uuid.NewString(), VendorID: v.ID, Environment: "sandbox", MCNumber: "MC1",
			Driver: wire.Driver{LicenseNumber: fmt.Sprintf("D%04d", i)}, CreatedAt: now, Status: wire.StatusProcessing,
			NextStepAt: &now, Services: []store.Service{{Name: wire.MVR, Status: wire.StatusProcessing}}}
		if err := b.CreateOrder(ctx, o, ""); err != nil {
			t.Fatal(err)
		}
	}
	var stepped [2]atomic.Int64
	var wg sync.WaitGroup
	for i, s := range []*Store{a, b} {
		for range 3 { // several workers per replica too
			wg.Add(1)
			go func() {
				defer wg.Done()
				ids, err := s.DueSandboxOrders(ctx, now, 1000)
				if err != nil {
					t.Error(err)
					return
				}
				for _, id := range ids {
					took := false
					_, err := s.UpdateOrder(ctx, id, func(o *store.Order) error {
						took = false
						if o.NextStepAt == nil || o.NextStepAt.After(now) {
							return nil // another worker took this step
						}
						o.Services[0].Steps++
						o.Services[0].Status = wire.StatusCompleted
						o.Status, o.Final, o.NextStepAt = wire.StatusCompleted, true, nil
						took = true
						return nil
					})
					if err != nil {
						t.Error(err)
						return
					}
					if took {
						stepped[i].Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	total := stepped[0].Load() + stepped[1].Load()
	t.Logf("steps: replica A %d, replica B %d", stepped[0].Load(), stepped[1].Load())
	if total != orders {
		t.Errorf("%d steps taken for %d due orders, want exactly one each", total, orders)
	}
	list, err := a.ListOrders(ctx, v.ID, nil, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range list {
		if o.Services[0].Steps != 1 {
			t.Errorf("order %s stepped %d times", o.ID, o.Services[0].Steps)
		}
	}

	// Idempotency across replicas: one winner per key.
	for round := range 10 {
		key := fmt.Sprintf("k%d", round)
		start := make(chan struct{})
		var wins atomic.Int64
		var wg sync.WaitGroup
		for i := range 8 {
			s := []*Store{a, b}[i%2]
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				e, err := s.ReserveIdempotency(ctx, store.Idempotency{VendorID: v.ID, Key: key, RequestHash: "h", CreatedAt: now})
				if err != nil {
					t.Error(err)
					return
				}
				if e == nil {
					wins.Add(1)
				}
			}()
		}
		close(start)
		wg.Wait()
		if wins.Load() != 1 {
			t.Fatalf("round %d: %d replicas won the same Idempotency-Key", round, wins.Load())
		}
	}

	// An updater on one replica sees a change the other replica holds a
	// lock on only after it commits.
	id := list[0].ID
	entered := make(chan struct{})
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := a.UpdateOrder(ctx, id, func(o *store.Order) error {
			close(entered)
			<-release
			o.Services[0].Steps = 100
			return nil
		})
		done <- err
	}()
	<-entered
	var seen atomic.Int64
	bDone := make(chan error, 1)
	go func() {
		_, err := b.UpdateOrder(ctx, id, func(o *store.Order) error {
			seen.Store(int64(o.Services[0].Steps))
			o.Services[0].Steps++
			return nil
		})
		bDone <- err
	}()
	early := false
	select {
	case err := <-bDone:
		early = true
		t.Errorf("replica B updated an order replica A holds locked (err %v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if early {
		return
	}
	if err := <-bDone; err != nil {
		t.Fatal(err)
	}
	if seen.Load() != 100 {
		t.Errorf("replica B's fn saw steps %d, want A's committed 100", seen.Load())
	}
	got, err := b.GetOrder(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got.Services[0].Steps != 101 {
		t.Errorf("steps %d after both updates, want 101", got.Services[0].Steps)
	}
	if _, err := a.GetOrder(ctx, uuid.NewString()); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetOrder of a missing id: %v", err)
	}
}

// testAuditRefusesUpdate: even SQL that bypasses the Store cannot change an
// audit record; deleting one (retention) still works.
func testAuditRefusesUpdate(t *testing.T, s *Store) {
	ctx := context.Background()
	at := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	if err := s.AppendAudit(ctx, &store.AuditRecord{ID: "a1", At: at, Actor: "ops", Action: "order.deleted", OrderID: "o1"}); err != nil {
		t.Fatal(err)
	}
	_, err := s.pool.Exec(ctx, "UPDATE audit_log SET actor = 'someone else' WHERE id = 'a1'")
	if err == nil || !strings.Contains(err.Error(), "append-only") {
		t.Fatalf("UPDATE of an audit record: %v, want it refused as append-only", err)
	}
	rs, err := s.ListAudit(ctx, store.AuditFilter{Limit: 5})
	if err != nil || len(rs) != 1 || rs[0].Actor != "ops" {
		t.Fatalf("after the refused UPDATE: %+v, %v", rs, err)
	}
	if n, err := s.DeleteAuditBefore(ctx, at.Add(time.Second)); err != nil || n != 1 {
		t.Fatalf("retention delete: %d, %v", n, err)
	}
}
