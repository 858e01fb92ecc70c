// Package storetest is the one test suite every store.Store implementation
// passes: the SQLite store and the PostgreSQL store run the same tests, so
// that the domain can rely on the interface's promises whatever the engine.
package storetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"vendorgate/backend/store"
	"vendorgate/shared/wire"
)

// Open returns a new, empty store for one test; the store is closed by the
// suite when the test ends.
type Open func(t *testing.T) store.Store

// Run runs every test of the suite as a parallel subtest of t, each on its
// own store from open.
func Run(t *testing.T, open Open) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"Ping", testPing},
		{"VendorRoundTrip", testVendorRoundTrip},
		{"VendorNotFound", testVendorNotFound},
		{"ListVendorsOldestFirst", testListVendors},
		{"UpdateVendor", testUpdateVendor},
		{"UpdateVendorFnErrorAborts", testUpdateVendorAbort},
		{"UpdateVendorConcurrentNoLostUpdate", testUpdateVendorConcurrent},
		{"KeyRoundTripAndByHash", testKeys},
		{"KeyNotFound", testKeyNotFound},
		{"KeyHashUnique", testKeyHashUnique},
		{"RevokeKeyOnce", testRevokeOnce},
		{"RevokeKeyConcurrent", testRevokeConcurrent},
		{"RotateKeyPairAndDue", testRotateKey},
		{"RotateKeyConcurrentOneWinner", testRotateKeyConcurrent},
		{"ExpiringKeysAndVendors", testExpiringKeys},
		{"IdempotencyReserveAndDrop", testIdempotency},
		{"IdempotencyRaceOneWinner", testIdempotencyRace},
		{"IdempotencyTakeOverOneWinner", testIdempotencyTakeOver},
		{"CreateOrderRoundTrip", testOrderRoundTrip},
		{"CreateOrderNilAndEmptyFields", testOrderNilVsEmpty},
		{"CreateOrderLinksIdempotency", testCreateOrderLinks},
		{"CreateOrderAtomic", testCreateOrderAtomic},
		{"OrderNotFound", testOrderNotFound},
		{"ListOrdersNewestFirstPaged", testListOrders},
		{"ListOrdersStableUnderInserts", testListOrdersStable},
		{"SearchOrders", testSearchOrders},
		{"UpdateOrder", testUpdateOrder},
		{"UpdateOrderFnErrorAborts", testUpdateOrderAbort},
		{"UpdateOrderConcurrentSerialized", testUpdateOrderConcurrent},
		{"DueSandboxOrders", testDueSandbox},
		{"UnfinishedBefore", testUnfinishedBefore},
		{"CountOrdersByStatus", testCount},
		{"Audit", testAudit},
		{"AuditNoUpdateMethod", testAuditNoUpdateMethod},
		{"ServiceUsage", testServiceUsage},
		{"UsageFlushOnce", testUsageFlush},
		{"BillingOutbox", testBillingOutbox},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			t.Cleanup(func() { _ = s.Close() })
			tc.fn(t, s)
		})
	}
}

// base is a fixed instant to the microsecond (the finest both engines
// keep), in a zone other than UTC so that the UTC round trip is tested.
var base = time.Date(2026, 3, 14, 15, 9, 26, 535897000, time.FixedZone("UTC-5", -5*3600))

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func ptr[T any](v T) *T { return &v }

// sameTime checks that got is want, in UTC.
func sameTime(t *testing.T, what string, got, want time.Time) {
	t.Helper()
	if !got.Equal(want) {
		t.Errorf("%s = %s, want %s", what, got.Format(time.RFC3339Nano), want.UTC().Format(time.RFC3339Nano))
	}
	inUTC(t, what, got)
}

func inUTC(t *testing.T, what string, tm time.Time) {
	t.Helper()
	if tm.Location() != time.UTC {
		t.Errorf("%s is in %s, want UTC", what, tm.Location())
	}
}

func sameTimePtr(t *testing.T, what string, got, want *time.Time) {
	t.Helper()
	switch {
	case got == nil && want == nil:
	case got == nil || want == nil:
		t.Errorf("%s = %v, want %v", what, got, want)
	default:
		sameTime(t, what, *got, *want)
	}
}

func newVendor(t *testing.T, s store.Store, created time.Time) *store.Vendor {
	t.Helper()
	v := &store.Vendor{ID: uuid.NewString(), CompanyName: "Acme " + created.Format(time.RFC3339Nano), Environment: "sandbox",
		Status: wire.VendorApproved, EnabledServices: []string{wire.MVR, wire.PSP}, CreatedAt: created}
	must(t, s.CreateVendor(ctx(t), v))
	return v
}

func newOrder(vendorID string, created time.Time, services ...string) *store.Order {
	if len(services) == 0 {
		services = []string{wire.MVR}
	}
	o := &store.Order{ID: uuid.NewString(), VendorID: vendorID, Environment: "sandbox", MCNumber: "MC12345",
		Driver:    wire.Driver{FirstName: "Ada", LastName: "Lovelace", DateOfBirth: "1985-12-10", LicenseNumber: "D1230001", LicenseState: "TX"},
		CreatedAt: created, Status: wire.StatusProcessing}
	for _, name := range services {
		o.Services = append(o.Services, store.Service{Name: name, Status: wire.StatusProcessing})
	}
	return o
}

func createOrder(t *testing.T, s store.Store, o *store.Order) *store.Order {
	t.Helper()
	must(t, s.CreateOrder(ctx(t), o, ""))
	return o
}

// canon is o with every time in UTC, for comparing whole orders.
func canon(o *store.Order) *store.Order {
	c := *o
	c.CreatedAt = c.CreatedAt.UTC()
	if c.NextStepAt != nil {
		c.NextStepAt = ptr(c.NextStepAt.UTC())
	}
	c.Services = append([]store.Service(nil), o.Services...)
	for i := range c.Services {
		if at := c.Services[i].CompletedAt; at != nil {
			c.Services[i].CompletedAt = ptr(at.UTC())
		}
	}
	return &c
}

func sameOrder(t *testing.T, got, want *store.Order) {
	t.Helper()
	sameTime(t, "order created_at", got.CreatedAt, want.CreatedAt)
	if got.NextStepAt != nil {
		inUTC(t, "order next_step_at", *got.NextStepAt)
	}
	for _, sv := range got.Services {
		if sv.CompletedAt != nil {
			inUTC(t, "service completed_at", *sv.CompletedAt)
		}
	}
	sameValues(t, got, want)
}

// sameValues compares two orders whatever the zones of their times.
func sameValues(t *testing.T, got, want *store.Order) {
	t.Helper()
	if g, w := canon(got), canon(want); !reflect.DeepEqual(g, w) {
		gj, _ := json.MarshalIndent(g, "", " ")
		wj, _ := json.MarshalIndent(w, "", " ")
		t.Errorf("order read back differs:\ngot  %s\nwant %s", gj, wj)
	}
}

func testPing(t *testing.T, s store.Store) {
	must(t, s.Ping(ctx(t)))
}

func testVendorRoundTrip(t *testing.T, s store.Store) {
	v := newVendor(t, s, base)
	got, err := s.GetVendor(ctx(t), v.ID)
	must(t, err)
	sameTime(t, "created_at", got.CreatedAt, base)
	if got.ID != v.ID || got.CompanyName != v.CompanyName || got.Environment != v.Environment || got.Status != v.Status ||
		!reflect.DeepEqual(got.EnabledServices, v.EnabledServices) {
		t.Errorf("vendor read back %+v, want %+v", got, v)
	}
	// No services is an empty list, never nil (it is JSON [] on the wire).
	empty := &store.Vendor{ID: uuid.NewString(), CompanyName: "Empty", Environment: "live", Status: wire.VendorPending, CreatedAt: base}
	must(t, s.CreateVendor(ctx(t), empty))
	got, err = s.GetVendor(ctx(t), empty.ID)
	must(t, err)
	if got.EnabledServices == nil || len(got.EnabledServices) != 0 {
		t.Errorf("enabled services of a vendor created with none = %#v, want []string{}", got.EnabledServices)
	}
	if err := s.CreateVendor(ctx(t), v); err == nil {
		t.Error("creating a vendor with an id already used succeeded")
	}
}

func testVendorNotFound(t *testing.T, s store.Store) {
	if _, err := s.GetVendor(ctx(t), uuid.NewString()); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetVendor of a missing id: %v, want ErrNotFound", err)
	}
	called := false
	_, err := s.UpdateVendor(ctx(t), uuid.NewString(), func(*store.Vendor) error { called = true; return nil })
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("UpdateVendor of a missing id: %v, want ErrNotFound", err)
	}
	if called {
		t.Error("UpdateVendor called fn for a missing vendor")
	}
}

func testListVendors(t *testing.T, s store.Store) {
	list, err := s.ListVendors(ctx(t))
	must(t, err)
	if len(list) != 0 {
		t.Fatalf("empty store lists %d vendors", len(list))
	}
	// Created out of time order: the list is by created_at, not insertion.
	offsets := []int{3, 0, 5, 1, 4, 2}
	want := make([]string, len(offsets))
	for _, off := range offsets {
		v := newVendor(t, s, base.Add(time.Duration(off)*time.Minute))
		want[off] = v.ID
	}
	list, err = s.ListVendors(ctx(t))
	must(t, err)
	var got []string
	for _, v := range list {
		got = append(got, v.ID)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ListVendors order = %v, want oldest first %v", got, want)
	}
}

func testUpdateVendor(t *testing.T, s store.Store) {
	v := newVendor(t, s, base)
	got, err := s.UpdateVendor(ctx(t), v.ID, func(v *store.Vendor) error {
		v.Status = wire.VendorSuspended
		v.EnabledServices = []string{wire.CDLIS}
		v.CompanyName = "Renamed"
		return nil
	})
	must(t, err)
	if got.Status != wire.VendorSuspended {
		t.Errorf("UpdateVendor returned status %q", got.Status)
	}
	read, err := s.GetVendor(ctx(t), v.ID)
	must(t, err)
	if read.Status != wire.VendorSuspended || read.CompanyName != "Renamed" || !reflect.DeepEqual(read.EnabledServices, []string{wire.CDLIS}) {
		t.Errorf("after UpdateVendor read %+v", read)
	}
	sameTime(t, "created_at after update", read.CreatedAt, base)
	_, err = s.UpdateVendor(ctx(t), v.ID, func(v *store.Vendor) error { v.EnabledServices = nil; return nil })
	must(t, err)
	read, err = s.GetVendor(ctx(t), v.ID)
	must(t, err)
	if read.EnabledServices == nil || len(read.EnabledServices) != 0 {
		t.Errorf("services saved as nil read back %#v, want []string{}", read.EnabledServices)
	}
}

var errAbort = errors.New("fn refuses")

func testUpdateVendorAbort(t *testing.T, s store.Store) {
	v := newVendor(t, s, base)
	_, err := s.UpdateVendor(ctx(t), v.ID, func(v *store.Vendor) error {
		v.Status = wire.VendorSuspended
		return fmt.Errorf("wrapped: %w", errAbort)
	})
	if !errors.Is(err, errAbort) {
		t.Fatalf("UpdateVendor returned %v, want fn's error", err)
	}
	read, err := s.GetVendor(ctx(t), v.ID)
	must(t, err)
	if read.Status != wire.VendorApproved {
		t.Errorf("fn's error still saved status %q", read.Status)
	}
}

// testUpdateVendorConcurrent: each of N updaters adds one service; with
// load, change and save in one transaction none is lost.
func testUpdateVendorConcurrent(t *testing.T, s store.Store) {
	v := newVendor(t, s, base)
	const n = 12
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.UpdateVendor(ctx(t), v.ID, func(v *store.Vendor) error {
				v.EnabledServices = append(v.EnabledServices, fmt.Sprintf("svc%02d", i))
				return nil
			})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, err)
	}
	read, err := s.GetVendor(ctx(t), v.ID)
	must(t, err)
	if len(read.EnabledServices) != 2+n {
		t.Errorf("after %d concurrent updates the vendor has %d services, want %d: %v", n, len(read.EnabledServices), 2+n, read.EnabledServices)
	}
}

func newKey(vendorID string, created time.Time) *store.Key {
	id := uuid.NewString()
	sum := sha256.Sum256([]byte(id))
	return &store.Key{ID: id, VendorID: vendorID, Hash: hex.EncodeToString(sum[:]), Prefix: "vg_test_",
		Environment: "sandbox", CreatedAt: created, ExpiresAt: created.Add(90 * 24 * time.Hour)}
}

func sameKey(t *testing.T, got, want *store.Key) {
	t.Helper()
	if got.ID != want.ID || got.VendorID != want.VendorID || got.Hash != want.Hash || got.Prefix != want.Prefix || got.Environment != want.Environment {
		t.Errorf("key read back %+v, want %+v", got, want)
	}
	sameTime(t, "key created_at", got.CreatedAt, want.CreatedAt)
	sameTime(t, "key expires_at", got.ExpiresAt, want.ExpiresAt)
	sameTimePtr(t, "key revoked_at", got.RevokedAt, want.RevokedAt)
}

func testKeys(t *testing.T, s store.Store) {
	v := newVendor(t, s, base)
	other := newVendor(t, s, base)
	var want []*store.Key
	for _, off := range []int{2, 0, 1} {
		k := newKey(v.ID, base.Add(time.Duration(off)*time.Hour))
		must(t, s.CreateKey(ctx(t), k))
		want = append(want, k)
	}
	must(t, s.CreateKey(ctx(t), newKey(other.ID, base)))
	got, err := s.GetKey(ctx(t), want[0].ID)
	must(t, err)
	sameKey(t, got, want[0])
	if got.RevokedAt != nil {
		t.Errorf("a new key reads back revoked at %v", got.RevokedAt)
	}
	got, err = s.GetKeyByHash(ctx(t), want[1].Hash)
	must(t, err)
	sameKey(t, got, want[1])

	list, err := s.ListKeys(ctx(t), v.ID)
	must(t, err)
	sort.Slice(want, func(i, j int) bool { return want[i].CreatedAt.Before(want[j].CreatedAt) })
	if len(list) != len(want) {
		t.Fatalf("ListKeys returned %d keys, want %d (the other vendor's excluded)", len(list), len(want))
	}
	for i := range list {
		sameKey(t, list[i], want[i])
	}
	none, err := s.ListKeys(ctx(t), uuid.NewString())
	must(t, err)
	if len(none) != 0 {
		t.Errorf("ListKeys of an unknown vendor returned %d keys", len(none))
	}
}

func testKeyNotFound(t *testing.T, s store.Store) {
	if _, err := s.GetKey(ctx(t), uuid.NewString()); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetKey of a missing id: %v, want ErrNotFound", err)
	}
	if _, err := s.GetKeyByHash(ctx(t), "00"+uuid.NewString()); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetKeyByHash of a missing hash: %v, want ErrNotFound", err)
	}
	if _, err := s.RevokeKey(ctx(t), uuid.NewString(), base); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RevokeKey of a missing id: %v, want ErrNotFound", err)
	}
}

func testKeyHashUnique(t *testing.T, s store.Store) {
	v := newVendor(t, s, base)
	k := newKey(v.ID, base)
	must(t, s.CreateKey(ctx(t), k))
	dup := newKey(v.ID, base)
	dup.Hash = k.Hash
	if err := s.CreateKey(ctx(t), dup); err == nil {
		t.Error("a second key with the same hash was stored")
	}
}

func testRevokeOnce(t *testing.T, s store.Store) {
	v := newVendor(t, s, base)
	k := newKey(v.ID, base)
	must(t, s.CreateKey(ctx(t), k))
	first := base.Add(time.Hour)
	got, err := s.RevokeKey(ctx(t), k.ID, first)
	must(t, err)
	sameTimePtr(t, "revoked_at", got.RevokedAt, &first)
	got, err = s.RevokeKey(ctx(t), k.ID, first.Add(time.Hour))
	must(t, err)
	sameTimePtr(t, "revoked_at after a second revoke", got.RevokedAt, &first)
	got, err = s.GetKeyByHash(ctx(t), k.Hash)
	must(t, err)
	sameTimePtr(t, "revoked key read by hash", got.RevokedAt, &first)
}

// testRevokeConcurrent: revokes racing with different times all answer the
// one time that was kept.
func testRevokeConcurrent(t *testing.T, s store.Store) {
	v := newVendor(t, s, base)
	k := newKey(v.ID, base)
	must(t, s.CreateKey(ctx(t), k))
	const n = 10
	got := make([]*store.Key, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, err := s.RevokeKey(ctx(t), k.ID, base.Add(time.Duration(i+1)*time.Minute))
			if err != nil {
				t.Error(err)
				return
			}
			got[i] = k
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	kept, err := s.GetKey(ctx(t), k.ID)
	must(t, err)
	if kept.RevokedAt == nil {
		t.Fatal("key not revoked")
	}
	for i, g := range got {
		sameTimePtr(t, fmt.Sprintf("revoker %d saw revoked_at", i), g.RevokedAt, kept.RevokedAt)
	}
}

func testIdempotency(t *testing.T, s store.Store) {
	v := newVendor(t, s, base)
	rec := store.Idempotency{VendorID: v.ID, Key: "order-1", RequestHash: "hash-a", CreatedAt: base}
	existing, err := s.ReserveIdempotency(ctx(t), rec)
	must(t, err)
	if existing != nil {
		t.Fatalf("first reservation found %+v", existing)
	}
	again := rec
	again.RequestHash, again.CreatedAt = "hash-b", base.Add(time.Minute)
	existing, err = s.ReserveIdempotency(ctx(t), again)
	must(t, err)
	if existing == nil {
		t.Fatal("second reservation of the same key found nothing")
	}
	if existing.VendorID != v.ID || existing.Key != "order-1" || existing.RequestHash != "hash-a" || existing.OrderID != "" {
		t.Errorf("existing record %+v, want the first one with no order", existing)
	}
	sameTime(t, "idempotency created_at", existing.CreatedAt, base)

	// Another vendor's key of the same name is another record.
	other := rec
	other.VendorID = uuid.NewString()
	existing, err = s.ReserveIdempotency(ctx(t), other)
	must(t, err)
	if existing != nil {
		t.Errorf("another vendor's key collided with %+v", existing)
	}

	must(t, s.DropIdempotency(ctx(t), v.ID, "order-1"))
	existing, err = s.ReserveIdempotency(ctx(t), again)
	must(t, err)
	if existing != nil {
		t.Errorf("after DropIdempotency the key is still held by %+v", existing)
	}
	// Dropping a key never reserved is no error.
	must(t, s.DropIdempotency(ctx(t), v.ID, "never-used"))
}

// testIdempotencyRace: N reservations of one key at the same moment, exactly
// one wins and every loser reads the winner's record.
func testIdempotencyRace(t *testing.T, s store.Store) {
	v := newVendor(t, s, base)
	const n = 16
	for round := range 5 {
		key := fmt.Sprintf("race-%d", round)
		start := make(chan struct{})
		results := make([]*store.Idempotency, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				results[i], errs[i] = s.ReserveIdempotency(ctx(t), store.Idempotency{VendorID: v.ID, Key: key,
					RequestHash: fmt.Sprintf("hash-%d", i), CreatedAt: base})
			}()
		}
		close(start)
		wg.Wait()
		winners, winner := 0, -1
		for i := range n {
			must(t, errs[i])
			if results[i] == nil {
				winners++
				winner = i
			}
		}
		if winners != 1 {
			t.Fatalf("round %d: %d reservations won, want exactly 1", round, winners)
		}
		for i, r := range results {
			if r != nil && r.RequestHash != fmt.Sprintf("hash-%d", winner) {
				t.Errorf("round %d: loser %d read hash %q, want the winner's hash-%d", round, i, r.RequestHash, winner)
			}
		}
	}
}

// testIdempotencyTakeOver: N placements take one abandoned record over at
// the same moment; exactly one wins, and the order it then places is linked
// to a record carrying its request hash. A record that changed since it was
// read (taken over, or linked to an order) is not taken over.
func testIdempotencyTakeOver(t *testing.T, s store.Store) {
	v := newVendor(t, s, base)
	const n = 8
	for round := range 5 {
		key := fmt.Sprintf("abandoned-%d", round)
		abandoned := store.Idempotency{VendorID: v.ID, Key: key, RequestHash: "crashed", CreatedAt: base}
		existing, err := s.ReserveIdempotency(ctx(t), abandoned)
		must(t, err)
		if existing != nil {
			t.Fatalf("fresh key already reserved: %+v", existing)
		}
		// What a retry reads back, as the domain would.
		existing, err = s.ReserveIdempotency(ctx(t), store.Idempotency{VendorID: v.ID, Key: key, RequestHash: "x", CreatedAt: base.Add(time.Minute)})
		must(t, err)
		if existing == nil {
			t.Fatal("the abandoned record was not returned")
		}
		start := make(chan struct{})
		won := make([]bool, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				won[i], errs[i] = s.TakeOverIdempotency(ctx(t), *existing, store.Idempotency{VendorID: v.ID, Key: key,
					RequestHash: fmt.Sprintf("hash-%d", i), CreatedAt: base.Add(time.Minute)})
			}()
		}
		close(start)
		wg.Wait()
		winner := -1
		for i := range n {
			must(t, errs[i])
			if won[i] {
				if winner >= 0 {
					t.Fatalf("round %d: takeovers %d and %d both won", round, winner, i)
				}
				winner = i
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no takeover won", round)
		}
		o := newOrder(v.ID, base.Add(time.Minute))
		must(t, s.CreateOrder(ctx(t), o, key))
		rec, err := s.ReserveIdempotency(ctx(t), abandoned)
		must(t, err)
		if rec == nil || rec.OrderID != o.ID || rec.RequestHash != fmt.Sprintf("hash-%d", winner) {
			t.Fatalf("round %d: the key's record is %+v, want order %s with the winner's hash-%d", round, rec, o.ID, winner)
		}
		sameTime(t, "taken-over created_at", rec.CreatedAt, base.Add(time.Minute))
		// Linked now: the stale copy takes nothing over.
		again, err := s.TakeOverIdempotency(ctx(t), *existing, store.Idempotency{VendorID: v.ID, Key: key, RequestHash: "late", CreatedAt: base.Add(time.Hour)})
		must(t, err)
		if again {
			t.Fatalf("round %d: a record linked to an order was taken over", round)
		}
	}
}

func testOrderRoundTrip(t *testing.T, s store.Store) {
	v := newVendor(t, s, base)
	o := newOrder(v.ID, base, wire.MVR, wire.PSP, wire.CDLIS, wire.DriverReviews)
	o.ExternalReference = ptr("PO-4471")
	o.NextStepAt = ptr(base.Add(5 * time.Second))
	done := base.Add(time.Minute)
	o.Services[0] = store.Service{Name: wire.MVR, Status: wire.StatusUnderReview, Reason: ptr(wire.ReasonIdentityReview), State: ptr("TX"), Steps: 1}
	o.Services[1] = store.Service{Name: wire.PSP, Status: wire.StatusCompleted, CompletedAt: &done, ReportPath: "o/psp.pdf", Steps: 2}
	o.Services[3] = store.Service{Name: wire.DriverReviews, Status: wire.StatusCompleted, CompletedAt: &done, Steps: 1,
		Result: &wire.ReviewsResult{Found: true, Reviews: []wire.Review{{Rating: ptr(4.5), Text: ptr("on time"), Date: ptr("2025-06-14")}, {}}}}
	o.Status = wire.StatusUnderReview
	createOrder(t, s, o)
	got, err := s.GetOrder(ctx(t), o.ID)
	must(t, err)
	sameOrder(t, got, o)

	f := newOrder(v.ID, base.Add(time.Second), wire.MVR)
	f.Services[0].Status, f.Services[0].Reason = wire.StatusFailed, ptr(wire.ReasonNoRecord)
	f.Status, f.Final = wire.StatusFailed, true
	createOrder(t, s, f)
	got, err = s.GetOrder(ctx(t), f.ID)
	must(t, err)
	sameOrder(t, got, f)
}

// testOrderNilVsEmpty: a field that is absent (nil) and one that is empty
// are different answers on the wire and must read back as stored.
func testOrderNilVsEmpty(t *testing.T, s store.Store) {
	v := newVendor(t, s, base)
	nils := newOrder(v.ID, base, wire.MVR, wire.DriverReviews)
	empties := newOrder(v.ID, base, wire.MVR, wire.DriverReviews)
	empties.ExternalReference = ptr("")
	empties.Services[0].Reason, empties.Services[0].State = ptr(""), ptr("")
	empties.Services[1].Result = &wire.ReviewsResult{Found: false, Reviews: []wire.Review{}}
	for _, o := range []*store.Order{nils, empties} {
		createOrder(t, s, o)
		got, err := s.GetOrder(ctx(t), o.ID)
		must(t, err)
		sameOrder(t, got, o)
	}
	got, err := s.GetOrder(ctx(t), nils.ID)
	must(t, err)
	if got.ExternalReference != nil || got.Services[0].Reason != nil || got.Services[0].State != nil ||
		got.Services[0].CompletedAt != nil || got.Services[1].Result != nil || got.NextStepAt != nil {
		t.Errorf("nil fields read back set: %+v", got)
	}
	got, err = s.GetOrder(ctx(t), empties.ID)
	must(t, err)
	if got.ExternalReference == nil || got.Services[0].Reason == nil || got.Services[1].Result == nil || got.Services[1].Result.Reviews == nil {
		t.Errorf("empty fields read back nil: %+v", got)
	}
}

func testCreateOrderLinks(t *testing.T, s store.Store) {
	v := newVendor(t, s, base)
	rec := store.Idempotency{VendorID: v.ID, Key: "k1", RequestHash: "h1", CreatedAt: base}
	existing, err := s.ReserveIdempotency(ctx(t), rec)
	must(t, err)
	if existing != nil {
		t.Fatal("fresh key already reserved")
	}
	o := newOrder(v.ID, base)
	must(t, s.CreateOrder(ctx(t), o, "k1"))
	existing, err = s.ReserveIdempotency(ctx(t), rec)
	must(t, err)
	if existing == nil || existing.OrderID != o.ID || existing.RequestHash != "h1" {
		t.Fatalf("after CreateOrder the key's record is %+v, want it pointing at %s", existing, o.ID)
	}
	// A record with an order is never dropped.
	must(t, s.DropIdempotency(ctx(t), v.ID, "k1"))
	existing, err = s.ReserveIdempotency(ctx(t), rec)
	must(t, err)
	if existing == nil || existing.OrderID != o.ID {
		t.Errorf("DropIdempotency removed a record with an order: now %+v", existing)
	}
}

// testCreateOrderAtomic: a CreateOrder that fails at any part leaves
// nothing: no order, no services, no idempotency link.
func testCreateOrderAtomic(t *testing.T, s store.Store) {
	v := newVendor(t, s, base)

	// The idempotency link fails (no reserved record): order and services
	// are rolled back.
	o := newOrder(v.ID, base, wire.MVR, wire.PSP)
	if err := s.CreateOrder(ctx(t), o, "never-reserved"); err == nil {
		t.Fatal("CreateOrder linked a key that was never reserved")
	}
	if _, err := s.GetOrder(ctx(t), o.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("failed CreateOrder left the order: %v", err)
	}
	// Nothing of it is left over: the same id and services insert cleanly.
	createOrder(t, s, o)
	got, err := s.GetOrder(ctx(t), o.ID)
	must(t, err)
	sameOrder(t, got, o)

	// A service that cannot be saved (listed twice) rolls back the order
	// and leaves the key reserved with no order.
	rec := store.Idempotency{VendorID: v.ID, Key: "k2", RequestHash: "h2", CreatedAt: base}
	existing, err := s.ReserveIdempotency(ctx(t), rec)
	must(t, err)
	if existing != nil {
		t.Fatal("fresh key already reserved")
	}
	bad := newOrder(v.ID, base, wire.MVR, wire.MVR)
	if err := s.CreateOrder(ctx(t), bad, "k2"); err == nil {
		t.Fatal("CreateOrder saved a service twice")
	}
	if _, err := s.GetOrder(ctx(t), bad.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("failed CreateOrder left the order: %v", err)
	}
	existing, err = s.ReserveIdempotency(ctx(t), rec)
	must(t, err)
	if existing == nil || existing.OrderID != "" {
		t.Errorf("failed CreateOrder changed the key's record: %+v", existing)
	}
	list, err := s.ListOrders(ctx(t), v.ID, nil, 10)
	must(t, err)
	if len(list) != 1 {
		t.Errorf("vendor lists %d orders, want the 1 created", len(list))
	}
	// An order id used twice is refused and changes nothing.
	dup := newOrder(v.ID, base.Add(time.Hour), wire.CDLIS)
	dup.ID = o.ID
	if err := s.CreateOrder(ctx(t), dup, ""); err == nil {
		t.Error("a second order with the same id was created")
	}
	got, err = s.GetOrder(ctx(t), o.ID)
	must(t, err)
	sameOrder(t, got, o)
}

func testOrderNotFound(t *testing.T, s store.Store) {
	if _, err := s.GetOrder(ctx(t), uuid.NewString()); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetOrder of a missing id: %v, want ErrNotFound", err)
	}
	called := false
	_, err := s.UpdateOrder(ctx(t), uuid.NewString(), func(*store.Order) error { called = true; return nil })
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("UpdateOrder of a missing id: %v, want ErrNotFound", err)
	}
	if called {
		t.Error("UpdateOrder called fn for a missing order")
	}
}

// sortNewestFirst is the list order: created_at, then id, both descending.
func sortNewestFirst(l []*store.Order) {
	sort.Slice(l, func(i, j int) bool {
		if !l[i].CreatedAt.Equal(l[j].CreatedAt) {
			return l[i].CreatedAt.After(l[j].CreatedAt)
		}
		return l[i].ID > l[j].ID
	})
}

func ids(l []*store.Order) []string {
	out := make([]string, len(l))
	for i, o := range l {
		out[i] = o.ID
	}
	return out
}

func page(t *testing.T, s store.Store, vendorID string, after *store.Cursor, limit int) ([]*store.Order, *store.Cursor) {
	t.Helper()
	list, err := s.ListOrders(ctx(t), vendorID, after, limit)
	must(t, err)
	if len(list) > limit {
		t.Fatalf("ListOrders returned %d orders with limit %d", len(list), limit)
	}
	if len(list) == 0 {
		return list, nil
	}
	last := list[len(list)-1]
	return list, &store.Cursor{CreatedAt: last.CreatedAt, OrderID: last.ID}
}

func testListOrders(t *testing.T, s store.Store) {
	v := newVendor(t, s, base)
	other := newVendor(t, s, base)
	var want []*store.Order
	// 23 orders, several sharing a created_at so that ties break by id.
	for i := range 23 {
		o := newOrder(v.ID, base.Add(time.Duration(i%9)*time.Second), wire.MVR, wire.PSP)
		createOrder(t, s, o)
		want = append(want, o)
	}
	createOrder(t, s, newOrder(other.ID, base.Add(time.Hour)))
	sortNewestFirst(want)

	var got []*store.Order
	var after *store.Cursor
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("paging does not end")
		}
		list, next := page(t, s, v.ID, after, 5)
		got = append(got, list...)
		if len(list) < 5 {
			break
		}
		after = next
	}
	if !reflect.DeepEqual(ids(got), ids(want)) {
		t.Fatalf("paged list:\n got %v\nwant %v", ids(got), ids(want))
	}
	for i := range got {
		sameOrder(t, got[i], want[i])
	}
	all, err := s.ListOrders(ctx(t), v.ID, nil, 100)
	must(t, err)
	if !reflect.DeepEqual(ids(all), ids(want)) {
		t.Errorf("one page of 100 differs from the paged walk")
	}
	none, err := s.ListOrders(ctx(t), uuid.NewString(), nil, 10)
	must(t, err)
	if len(none) != 0 {
		t.Errorf("unknown vendor lists %d orders", len(none))
	}
}

// testListOrdersStable: orders placed while a client pages do not shift
// the pages it has not read yet: no order twice, none skipped.
func testListOrdersStable(t *testing.T, s store.Store) {
	v := newVendor(t, s, base)
	var want []*store.Order
	for i := range 12 {
		o := newOrder(v.ID, base.Add(time.Duration(i/2)*time.Second))
		createOrder(t, s, o)
		want = append(want, o)
	}
	sortNewestFirst(want)
	var got []*store.Order
	var after *store.Cursor
	for i := 0; i < 10; i++ {
		list, next := page(t, s, v.ID, after, 4)
		got = append(got, list...)
		if len(list) < 4 {
			break
		}
		after = next
		// New orders arrive between pages, newer than everything listed.
		for j := range 3 {
			createOrder(t, s, newOrder(v.ID, base.Add(time.Hour+time.Duration(i*3+j)*time.Second)))
		}
	}
	if !reflect.DeepEqual(ids(got), ids(want)) {
		t.Fatalf("pages under inserts:\n got %v\nwant %v", ids(got), ids(want))
	}
}

func testUpdateOrder(t *testing.T, s store.Store) {
	v := newVendor(t, s, base)
	o := newOrder(v.ID, base, wire.MVR, wire.PSP, wire.DriverReviews)
	o.NextStepAt = ptr(base.Add(time.Second))
	createOrder(t, s, o)
	done := base.Add(2 * time.Second)
	var seen *store.Order
	got, err := s.UpdateOrder(ctx(t), o.ID, func(c *store.Order) error {
		seen = canon(c)
		c.Services[0].Status, c.Services[0].Reason, c.Services[0].Steps = wire.StatusFailed, ptr(wire.ReasonNoRecord), 1
		c.Services[1].Status, c.Services[1].CompletedAt, c.Services[1].ReportPath, c.Services[1].Steps = wire.StatusCompleted, &done, "x/psp.pdf", 1
		c.Services[2].Status, c.Services[2].CompletedAt, c.Services[2].Steps = wire.StatusCompleted, &done, 1
		c.Services[2].Result = &wire.ReviewsResult{Found: true, Reviews: []wire.Review{{Rating: ptr(3.0)}}}
		c.Status, c.Final, c.NextStepAt = wire.StatusPartiallyCompleted, true, nil
		return nil
	})
	must(t, err)
	sameOrder(t, seen, o)
	want := canon(o)
	want.Services[0] = store.Service{Name: wire.MVR, Status: wire.StatusFailed, Reason: ptr(wire.ReasonNoRecord), Steps: 1}
	want.Services[1] = store.Service{Name: wire.PSP, Status: wire.StatusCompleted, CompletedAt: &done, ReportPath: "x/psp.pdf", Steps: 1}
	want.Services[2] = store.Service{Name: wire.DriverReviews, Status: wire.StatusCompleted, CompletedAt: &done, Steps: 1,
		Result: &wire.ReviewsResult{Found: true, Reviews: []wire.Review{{Rating: ptr(3.0)}}}}
	want.Status, want.Final, want.NextStepAt = wire.StatusPartiallyCompleted, true, nil
	sameValues(t, got, want) // what fn made, returned as is
	read, err := s.GetOrder(ctx(t), o.ID)
	must(t, err)
	sameOrder(t, read, want)

	// Clearing fields saves them cleared.
	_, err = s.UpdateOrder(ctx(t), o.ID, func(c *store.Order) error {
		c.Services[0].Reason = nil
		c.Services[1].ReportPath = ""
		c.Services[2].Result = nil
		c.NextStepAt = ptr(base.Add(time.Hour))
		return nil
	})
	must(t, err)
	want.Services[0].Reason, want.Services[1].ReportPath, want.Services[2].Result = nil, "", nil
	want.NextStepAt = ptr(base.Add(time.Hour))
	read, err = s.GetOrder(ctx(t), o.ID)
	must(t, err)
	sameOrder(t, read, want)
}

func testUpdateOrderAbort(t *testing.T, s store.Store) {
	v := newVendor(t, s, base)
	o := newOrder(v.ID, base, wire.MVR, wire.PSP)
	o.NextStepAt = ptr(base)
	createOrder(t, s, o)
	_, err := s.UpdateOrder(ctx(t), o.ID, func(c *store.Order) error {
		c.Status, c.Final, c.NextStepAt = wire.StatusCompleted, true, nil
		c.Services[0].Status, c.Services[0].Steps = wire.StatusCompleted, 7
		c.Services = c.Services[:1]
		return fmt.Errorf("step: %w", errAbort)
	})
	if !errors.Is(err, errAbort) {
		t.Fatalf("UpdateOrder returned %v, want fn's error", err)
	}
	read, err := s.GetOrder(ctx(t), o.ID)
	must(t, err)
	sameOrder(t, read, o)
}

// testUpdateOrderConcurrent: N updaters each take one step on the order;
// each fn must see the previous one's save, so the count is exactly N.
func testUpdateOrderConcurrent(t *testing.T, s store.Store) {
	v := newVendor(t, s, base)
	o := newOrder(v.ID, base, wire.MVR, wire.PSP)
	createOrder(t, s, o)
	const n = 16
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := s.UpdateOrder(ctx(t), o.ID, func(c *store.Order) error {
				c.Services[0].Steps++
				c.Services[1].Steps += 2
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	close(start)
	wg.Wait()
	read, err := s.GetOrder(ctx(t), o.ID)
	must(t, err)
	if read.Services[0].Steps != n || read.Services[1].Steps != 2*n {
		t.Errorf("after %d concurrent updates steps are %d and %d, want %d and %d", n, read.Services[0].Steps, read.Services[1].Steps, n, 2*n)
	}
}

func sortedIDs(l []string) []string {
	out := append([]string{}, l...)
	sort.Strings(out)
	return out
}

func testDueSandbox(t *testing.T, s store.Store) {
	v := newVendor(t, s, base)
	now := base.Add(time.Hour)
	var due []string
	for _, at := range []*time.Time{ptr(now.Add(-time.Minute)), ptr(now), ptr(now.Add(-time.Hour)), ptr(now.Add(time.Microsecond)), ptr(now.Add(time.Minute)), nil} {
		o := newOrder(v.ID, base)
		o.NextStepAt = at
		createOrder(t, s, o)
		if at != nil && !at.After(now) {
			due = append(due, o.ID)
		}
	}
	got, err := s.DueSandboxOrders(ctx(t), now, 100)
	must(t, err)
	if !reflect.DeepEqual(sortedIDs(got), sortedIDs(due)) {
		t.Errorf("due orders %v, want %v (next step at or before now)", got, due)
	}
	got, err = s.DueSandboxOrders(ctx(t), now, 2)
	must(t, err)
	if len(got) != 2 {
		t.Errorf("limit 2 listed %d", len(got))
	}
	// Once the step is taken (NextStepAt cleared) the order is no longer due.
	_, err = s.UpdateOrder(ctx(t), due[0], func(c *store.Order) error { c.NextStepAt = nil; return nil })
	must(t, err)
	got, err = s.DueSandboxOrders(ctx(t), now, 100)
	must(t, err)
	if !reflect.DeepEqual(sortedIDs(got), sortedIDs(due[1:])) {
		t.Errorf("after clearing one, due orders %v, want %v", got, due[1:])
	}
	got, err = s.DueSandboxOrders(ctx(t), base.Add(-time.Hour), 100)
	must(t, err)
	if len(got) != 0 {
		t.Errorf("nothing is due before everything, got %v", got)
	}
}

func testUnfinishedBefore(t *testing.T, s store.Store) {
	v := newVendor(t, s, base)
	cut := base.Add(time.Hour)
	var want []string
	for _, c := range []struct {
		at    time.Time
		final bool
	}{
		{base, false}, {base, true}, {cut.Add(-time.Microsecond), false}, {cut, false}, {cut.Add(time.Minute), false}, {base.Add(time.Minute), false},
	} {
		o := newOrder(v.ID, c.at)
		o.Final = c.final
		if c.final {
			o.Status, o.Services[0].Status = wire.StatusCompleted, wire.StatusCompleted
		}
		createOrder(t, s, o)
		if !c.final && c.at.Before(cut) {
			want = append(want, o.ID)
		}
	}
	got, err := s.UnfinishedBefore(ctx(t), cut, 100)
	must(t, err)
	if !reflect.DeepEqual(sortedIDs(got), sortedIDs(want)) {
		t.Errorf("unfinished before the cut %v, want %v (not final, created strictly before)", got, want)
	}
	got, err = s.UnfinishedBefore(ctx(t), cut, 1)
	must(t, err)
	if len(got) != 1 {
		t.Errorf("limit 1 listed %d", len(got))
	}
	_, err = s.UpdateOrder(ctx(t), want[0], func(c *store.Order) error { c.Final, c.Status = true, wire.StatusFailed; return nil })
	must(t, err)
	got, err = s.UnfinishedBefore(ctx(t), cut, 100)
	must(t, err)
	if len(got) != len(want)-1 {
		t.Errorf("after finishing one, %d unfinished, want %d", len(got), len(want)-1)
	}
}

func testCount(t *testing.T, s store.Store) {
	counts, err := s.CountOrdersByStatus(ctx(t))
	must(t, err)
	if len(counts) != 0 {
		t.Errorf("empty store counts %v", counts)
	}
	v := newVendor(t, s, base)
	var first string
	for i, st := range []string{wire.StatusProcessing, wire.StatusProcessing, wire.StatusCompleted, wire.StatusFailed, wire.StatusProcessing} {
		o := newOrder(v.ID, base)
		o.Status = st
		createOrder(t, s, o)
		if i == 0 {
			first = o.ID
		}
	}
	counts, err = s.CountOrdersByStatus(ctx(t))
	must(t, err)
	want := map[string]int{wire.StatusProcessing: 3, wire.StatusCompleted: 1, wire.StatusFailed: 1}
	if !reflect.DeepEqual(counts, want) {
		t.Errorf("counts %v, want %v", counts, want)
	}
	_, err = s.UpdateOrder(ctx(t), first, func(c *store.Order) error { c.Status = wire.StatusUnderReview; return nil })
	must(t, err)
	counts, err = s.CountOrdersByStatus(ctx(t))
	must(t, err)
	want = map[string]int{wire.StatusProcessing: 2, wire.StatusCompleted: 1, wire.StatusFailed: 1, wire.StatusUnderReview: 1}
	if !reflect.DeepEqual(counts, want) {
		t.Errorf("after one update counts %v, want %v", counts, want)
	}
}

// rotate rotates old in the store as the vendors domain does: refused
// when it was rotated already, its successor created at created.
func rotate(s store.Store, old string, created, revokeAt time.Time) (*store.Key, *store.Key, error) {
	return s.RotateKey(context.Background(), old, func(k *store.Key) (*store.Key, error) {
		if k.ReplacedBy != "" {
			return nil, errRotated
		}
		n := newKey(k.VendorID, created)
		n.RotatedFrom = k.ID
		k.ReplacedBy, k.RevokeAt = n.ID, &revokeAt
		return n, nil
	})
}

var errRotated = errors.New("rotated already")

// testRotateKey: a rotation records the pair on both keys, the new key is
// stored, a refused rotation stores nothing, and the old key is due for
// revocation at the end of its overlap, not before, and no longer once
// revoked.
func testRotateKey(t *testing.T, s store.Store) {
	v := newVendor(t, s, base)
	k := newKey(v.ID, base)
	must(t, s.CreateKey(ctx(t), k))
	at := base.Add(24 * time.Hour)
	old, next, err := rotate(s, k.ID, base.Add(time.Hour), at)
	must(t, err)
	if old.ReplacedBy != next.ID || next.RotatedFrom != k.ID {
		t.Errorf("rotation answered old.ReplacedBy=%q next.RotatedFrom=%q, want %q and %q", old.ReplacedBy, next.RotatedFrom, next.ID, k.ID)
	}
	readOld, err := s.GetKey(ctx(t), k.ID)
	must(t, err)
	if readOld.ReplacedBy != next.ID || readOld.RotatedFrom != "" {
		t.Errorf("old key reads back replaced_by=%q rotated_from=%q, want %q and none", readOld.ReplacedBy, readOld.RotatedFrom, next.ID)
	}
	sameTimePtr(t, "old key revoke_at", readOld.RevokeAt, &at)
	if readOld.RevokedAt != nil {
		t.Errorf("a rotation revoked the old key at once: %v", readOld.RevokedAt)
	}
	readNew, err := s.GetKeyByHash(ctx(t), next.Hash)
	must(t, err)
	sameKey(t, readNew, next)
	if readNew.RotatedFrom != k.ID || readNew.ReplacedBy != "" || readNew.RevokeAt != nil {
		t.Errorf("new key reads back %+v, want rotated_from %s and nothing scheduled", readNew, k.ID)
	}
	if _, _, err := rotate(s, k.ID, base.Add(2*time.Hour), at); !errors.Is(err, errRotated) {
		t.Errorf("second rotation of one key: %v, want fn's error", err)
	}
	keys, err := s.ListKeys(ctx(t), v.ID)
	must(t, err)
	if len(keys) != 2 {
		t.Errorf("after a rotation and a refused one the vendor has %d keys, want 2", len(keys))
	}
	if _, _, err := rotate(s, uuid.NewString(), base, at); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("rotation of a missing key: %v, want ErrNotFound", err)
	}

	due, err := s.DueRevocations(ctx(t), at.Add(-time.Second), 10)
	must(t, err)
	if len(due) != 0 {
		t.Errorf("due a second before the overlap ends: %v", due)
	}
	due, err = s.DueRevocations(ctx(t), at, 10)
	must(t, err)
	if len(due) != 1 || due[0] != k.ID {
		t.Errorf("due when the overlap ends: %v, want [%s]", due, k.ID)
	}
	_, err = s.RevokeKey(ctx(t), k.ID, at)
	must(t, err)
	due, err = s.DueRevocations(ctx(t), at.Add(time.Hour), 10)
	must(t, err)
	if len(due) != 0 {
		t.Errorf("a revoked key is still due: %v", due)
	}
}

// testRotateKeyConcurrent: rotations of one key racing, each refusing a
// key rotated already, leave one successor.
func testRotateKeyConcurrent(t *testing.T, s store.Store) {
	v := newVendor(t, s, base)
	k := newKey(v.ID, base)
	must(t, s.CreateKey(ctx(t), k))
	const n = 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, err := rotate(s, k.ID, base.Add(time.Duration(i+1)*time.Minute), base.Add(24*time.Hour))
			switch {
			case err == nil:
				mu.Lock()
				won++
				mu.Unlock()
			case !errors.Is(err, errRotated):
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	keys, err := s.ListKeys(ctx(t), v.ID)
	must(t, err)
	if won != 1 || len(keys) != 2 {
		t.Errorf("%d concurrent rotations: %d succeeded and the vendor has %d keys, want 1 and 2", n, won, len(keys))
	}
}

// testExpiringKeys: ExpiringKeys lists every vendor's keys not revoked
// that expire before the bound, soonest first; CountVendorsExpiring counts
// approved live vendors with a key and none lasting past the bound.
func testExpiringKeys(t *testing.T, s store.Store) {
	mk := func(env, status string, expires ...time.Duration) (*store.Vendor, []*store.Key) {
		v := &store.Vendor{ID: uuid.NewString(), CompanyName: "Acme", Environment: env, Status: status, EnabledServices: []string{}, CreatedAt: base}
		must(t, s.CreateVendor(ctx(t), v))
		var ks []*store.Key
		for _, e := range expires {
			k := newKey(v.ID, base)
			k.ExpiresAt = base.Add(e)
			must(t, s.CreateKey(ctx(t), k))
			ks = append(ks, k)
		}
		return v, ks
	}
	day := 24 * time.Hour
	_, soon := mk("live", wire.VendorApproved, 3*day)            // counted
	_, mixed := mk("live", wire.VendorApproved, 2*day, 60*day)   // a key lasts: not counted
	_, sandbox := mk("sandbox", wire.VendorApproved, 5*day)      // sandbox: not counted
	_, pending := mk("live", wire.VendorPending, 4*day)          // not approved: not counted
	_, _ = mk("live", wire.VendorApproved)                       // no key: not counted
	_, revoked := mk("live", wire.VendorApproved, 1*day, 90*day) // the lasting key revoked: counted
	_, err := s.RevokeKey(ctx(t), revoked[1].ID, base)
	must(t, err)

	bound := base.Add(7 * day)
	n, err := s.CountVendorsExpiring(ctx(t), bound)
	must(t, err)
	if n != 2 {
		t.Errorf("CountVendorsExpiring = %d, want 2", n)
	}
	got, err := s.ExpiringKeys(ctx(t), base, bound)
	must(t, err)
	// Every vendor's keys, the pending and the sandbox vendor's too: the
	// list is every key, the gauge only approved live vendors.
	want := []string{revoked[0].ID, mixed[0].ID, soon[0].ID, pending[0].ID, sandbox[0].ID}
	var ids []string
	for _, k := range got {
		ids = append(ids, k.ID)
	}
	if !reflect.DeepEqual(ids, want) {
		t.Errorf("ExpiringKeys = %v, want %v", ids, want)
	}
	// Keys expired already are not listed.
	got, err = s.ExpiringKeys(ctx(t), base.Add(day+time.Hour), bound)
	must(t, err)
	if len(got) != 4 || got[0].ID != mixed[0].ID {
		t.Errorf("ExpiringKeys after the first key expired: %d keys, first %v; want 4, first %s", len(got), got, mixed[0].ID)
	}
}
