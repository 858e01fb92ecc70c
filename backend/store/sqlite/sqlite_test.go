package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"vendorgate/backend/store"
	"vendorgate/shared/wire"
)

func open(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func vendor(t *testing.T, s *Store) *store.Vendor {
	t.Helper()
	v := &store.Vendor{ID: uuid.NewString(), CompanyName: "Acme", Environment: "sandbox", Status: wire.VendorApproved,
		EnabledServices: []string{"mvr", "psp"}, CreatedAt: time.Now().UTC().Truncate(time.Second)}
	if err := s.CreateVendor(context.Background(), v); err != nil {
		t.Fatal(err)
	}
	return v
}

func order(v *store.Vendor, created time.Time) *store.Order {
	ref := "po-1"
	return &store.Order{ID: uuid.NewString(), VendorID: v.ID, Environment: v.Environment, MCNumber: "MC1",
		ExternalReference: &ref, Driver: wire.Driver{FirstName: "Ann", LastName: "Lee", DateOfBirth: "1980-02-03",
			LicenseNumber: "D1", LicenseState: "TX"}, CreatedAt: created, Status: wire.StatusProcessing,
		Services: []store.Service{{Name: "mvr", Status: wire.StatusProcessing}, {Name: "psp", Status: wire.StatusProcessing}}}
}

func TestMigrationsAppliedOnceAndDataSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sub", "vg.db") // parent created by Open
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	v := vendor(t, s)
	if _, err := s.ReserveIdempotency(ctx, store.Idempotency{VendorID: v.ID, Key: "k", RequestHash: "h", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	o := order(v, time.Now().UTC())
	if err := s.CreateOrder(ctx, o, "k"); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s2 := open(t, path) // migrations must not run twice
	var n int
	names, _ := migrations.ReadDir("migrations")
	if err := s2.db.QueryRow("SELECT COUNT(*) FROM schema_migrations").Scan(&n); err != nil || n != len(names) || n == 0 {
		t.Fatalf("schema_migrations rows = %d, %v; want one per migration (%d)", n, err, len(names))
	}
	var mode string
	if err := s2.db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode = %q, %v; want wal", mode, err)
	}
	got, err := s2.GetOrder(ctx, o.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Services) != 2 || got.Services[0].Name != "mvr" || *got.ExternalReference != "po-1" || got.Driver.LicenseState != "TX" {
		t.Fatalf("order after restart = %+v", got)
	}
	rec, err := s2.ReserveIdempotency(ctx, store.Idempotency{VendorID: v.ID, Key: "k", RequestHash: "other", CreatedAt: time.Now()})
	if err != nil || rec == nil || rec.OrderID != o.ID || rec.RequestHash != "h" {
		t.Fatalf("idempotency record after restart = %+v, %v", rec, err)
	}
}

func TestCreateOrderIsOneTransaction(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "vg.db"))
	v := vendor(t, s)
	o := order(v, time.Now().UTC())
	// No reserved idempotency record: linking fails after the order and its
	// services were inserted, and none of it may remain.
	if err := s.CreateOrder(ctx, o, "never-reserved"); err == nil {
		t.Fatal("CreateOrder without a reserved record succeeded")
	}
	if _, err := s.GetOrder(ctx, o.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("half order left behind: %v", err)
	}
	var n int
	s.db.QueryRow("SELECT COUNT(*) FROM order_services WHERE order_id = ?", o.ID).Scan(&n)
	if n != 0 {
		t.Fatalf("%d service rows left behind", n)
	}
}

func TestReserveIdempotencyRaceHasOneWinner(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "vg.db"))
	v := vendor(t, s)
	var wg sync.WaitGroup
	var mu sync.Mutex
	winners, losers := 0, 0
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec, err := s.ReserveIdempotency(ctx, store.Idempotency{VendorID: v.ID, Key: "same", RequestHash: "h", CreatedAt: time.Now()})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Error(err)
			case rec == nil:
				winners++
			default:
				losers++
			}
		}()
	}
	wg.Wait()
	if winners != 1 || losers != 15 {
		t.Fatalf("winners %d losers %d; want 1 and 15", winners, losers)
	}
	// Scoped per vendor: another vendor may use the same key.
	other := vendor(t, s)
	if rec, err := s.ReserveIdempotency(ctx, store.Idempotency{VendorID: other.ID, Key: "same", RequestHash: "h", CreatedAt: time.Now()}); err != nil || rec != nil {
		t.Fatalf("other vendor's reserve = %+v, %v; want a fresh record", rec, err)
	}
	if err := s.DropIdempotency(ctx, v.ID, "same"); err != nil {
		t.Fatal(err)
	}
	if rec, _ := s.ReserveIdempotency(ctx, store.Idempotency{VendorID: v.ID, Key: "same", RequestHash: "h", CreatedAt: time.Now()}); rec != nil {
		t.Fatal("dropped record still there")
	}
}

func TestListOrdersNewestFirstWithCursor(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "vg.db"))
	v, other := vendor(t, s), vendor(t, s)
	base := time.Now().UTC()
	var ids []string
	for i := 0; i < 5; i++ {
		o := order(v, base.Add(time.Duration(i)*time.Millisecond))
		if err := s.CreateOrder(ctx, o, ""); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, o.ID)
	}
	if err := s.CreateOrder(ctx, order(other, base.Add(time.Hour)), ""); err != nil {
		t.Fatal(err)
	}
	page, err := s.ListOrders(ctx, v.ID, nil, 2)
	if err != nil || len(page) != 2 || page[0].ID != ids[4] || page[1].ID != ids[3] {
		t.Fatalf("first page = %v, %v", page, err)
	}
	if len(page[0].Services) != 2 {
		t.Fatal("list did not load services")
	}
	page, _ = s.ListOrders(ctx, v.ID, &store.Cursor{CreatedAt: page[1].CreatedAt, OrderID: page[1].ID}, 10)
	if len(page) != 3 || page[0].ID != ids[2] || page[2].ID != ids[0] {
		t.Fatalf("second page = %d orders", len(page))
	}
}

func TestUpdateOrderAbortsOnError(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "vg.db"))
	v := vendor(t, s)
	o := order(v, time.Now().UTC())
	if err := s.CreateOrder(ctx, o, ""); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	_, err := s.UpdateOrder(ctx, o.ID, func(o *store.Order) error {
		o.Services[0].Status = wire.StatusCompleted
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	got, _ := s.GetOrder(ctx, o.ID)
	if got.Services[0].Status != wire.StatusProcessing {
		t.Fatal("aborted update was saved")
	}
	reason, now := "identity_review", time.Now().UTC()
	_, err = s.UpdateOrder(ctx, o.ID, func(o *store.Order) error {
		o.Services[0].Status, o.Services[0].Reason, o.Services[0].CompletedAt = wire.StatusUnderReview, &reason, &now
		o.Services[1].Result = &wire.ReviewsResult{Found: true, Reviews: []wire.Review{}}
		o.Services[1].Steps = 2
		o.Status, o.Final, o.NextStepAt = wire.StatusUnderReview, false, &now
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got, _ = s.GetOrder(ctx, o.ID)
	if *got.Services[0].Reason != reason || got.Services[1].Result == nil || got.Services[1].Steps != 2 || got.Status != wire.StatusUnderReview {
		t.Fatalf("update not saved: %+v", got)
	}
	due, _ := s.DueSandboxOrders(ctx, now, 10)
	if len(due) != 1 {
		t.Fatalf("due = %v", due)
	}
	if due, _ := s.DueSandboxOrders(ctx, now.Add(-time.Second), 10); len(due) != 0 {
		t.Fatalf("not yet due = %v", due)
	}
	counts, _ := s.CountOrdersByStatus(ctx)
	if counts[wire.StatusUnderReview] != 1 {
		t.Fatalf("counts = %v", counts)
	}
	if ids, _ := s.UnfinishedBefore(ctx, got.CreatedAt.Add(time.Second), 10); len(ids) != 1 {
		t.Fatalf("unfinished = %v", ids)
	}
	if ids, _ := s.UnfinishedBefore(ctx, got.CreatedAt, 10); len(ids) != 0 {
		t.Fatalf("unfinished before creation = %v", ids)
	}
	if _, err := s.UpdateOrder(ctx, uuid.NewString(), func(*store.Order) error { return nil }); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing order: %v", err)
	}
}

func TestKeysStoredByHashAndRevokedOnce(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "vg.db"))
	v := vendor(t, s)
	now := time.Now().UTC().Truncate(time.Second)
	k := &store.Key{ID: uuid.NewString(), VendorID: v.ID, Hash: "ab12", Prefix: "vgsandbx", Environment: "sandbox",
		CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	if err := s.CreateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetKeyByHash(ctx, "ab12")
	if err != nil || got.ID != k.ID || !got.ExpiresAt.Equal(k.ExpiresAt) || got.RevokedAt != nil {
		t.Fatalf("by hash = %+v, %v", got, err)
	}
	if _, err := s.GetKeyByHash(ctx, "ffff"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown hash: %v", err)
	}
	r1, _ := s.RevokeKey(ctx, k.ID, now)
	r2, _ := s.RevokeKey(ctx, k.ID, now.Add(time.Hour))
	if r1.RevokedAt == nil || !r2.RevokedAt.Equal(now) {
		t.Fatalf("revoked_at = %v then %v; want the first time kept", r1.RevokedAt, r2.RevokedAt)
	}
	if _, err := s.RevokeKey(ctx, uuid.NewString(), now); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("revoke unknown: %v", err)
	}
	v2, err := s.UpdateVendor(ctx, v.ID, func(v *store.Vendor) error { v.Status = wire.VendorSuspended; v.EnabledServices = nil; return nil })
	if err != nil || v2.Status != wire.VendorSuspended {
		t.Fatal(err)
	}
	v3, _ := s.GetVendor(ctx, v.ID)
	if v3.Status != wire.VendorSuspended || v3.EnabledServices == nil || len(v3.EnabledServices) != 0 {
		t.Fatalf("vendor = %+v", v3)
	}
}
