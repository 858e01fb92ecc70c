// Package store holds the records the backend owns (vendors, keys, orders,
// idempotency records) and the Store interface the domain packages ask for.
// It is engine-neutral: backend/store/sqlite and backend/store/postgres
// implement it, and backend/store/storetest holds the suite both pass.
package store

import (
	"context"
	"errors"
	"time"

	"vendorgate/shared/wire"
)

// CallTimeout bounds each call to a store, SQLite and PostgreSQL alike: a
// call gives up that long after it began, or at its context's deadline when
// that comes first.
const CallTimeout = 10 * time.Second

// ErrNotFound is returned when no record has the given id.
var ErrNotFound = errors.New("not found")

// Vendor is a vendor account.
type Vendor struct {
	ID              string
	CompanyName     string
	Environment     string
	Status          string
	EnabledServices []string
	CreatedAt       time.Time
}

// Key is an API key, stored only by the hex SHA-256 of the whole key.
type Key struct {
	ID          string
	VendorID    string
	Hash        string
	Prefix      string
	Environment string
	CreatedAt   time.Time
	ExpiresAt   time.Time
	RevokedAt   *time.Time
	// RotatedFrom is the key this one was issued to replace (a rotation);
	// "" for a key issued on its own.
	RotatedFrom string
	// ReplacedBy is the key issued to replace this one; "" when it was
	// never rotated.
	ReplacedBy string
	// RevokeAt is when a rotation revokes this key, the end of its
	// overlap; nil when no revocation is scheduled.
	RevokeAt *time.Time
}

// Order is one order with its services. Status and Final are derived by the
// orders package and stored so that lists and gauges need not derive them.
type Order struct {
	ID                string
	VendorID          string
	Environment       string
	MCNumber          string
	ExternalReference *string
	Driver            wire.Driver
	CreatedAt         time.Time
	Status            string
	Final             bool
	// NextStepAt is when the sandbox provider next works the order; nil when
	// nothing is scheduled (live orders, held or final ones).
	NextStepAt *time.Time
	Services   []Service
}

// Service is one ordered service of an order.
type Service struct {
	Name        string
	Status      string
	Reason      *string
	State       *string
	CompletedAt *time.Time
	// ReportPath is the report file, relative to the reports directory;
	// empty when there is none.
	ReportPath string
	Result     *wire.ReviewsResult
	// Steps counts the sandbox provider's steps on this service.
	Steps int
}

// Idempotency is the record of one Idempotency-Key of one vendor.
type Idempotency struct {
	VendorID    string
	Key         string
	RequestHash string
	// OrderID is empty while the order is still being placed.
	OrderID   string
	CreatedAt time.Time
}

// Cursor is a position in a vendor's order list, newest first: the list
// continues with orders older than (CreatedAt, OrderID).
type Cursor struct {
	CreatedAt time.Time
	OrderID   string
}

// Store is what the domain needs from storage. Every method is safe for
// concurrent use.
type Store interface {
	Ping(ctx context.Context) error
	Close() error

	CreateVendor(ctx context.Context, v *Vendor) error
	GetVendor(ctx context.Context, id string) (*Vendor, error)
	// ListVendors lists every vendor, oldest first.
	ListVendors(ctx context.Context) ([]*Vendor, error)
	// UpdateVendor loads the vendor, lets fn change it and saves it, in one
	// transaction.
	UpdateVendor(ctx context.Context, id string, fn func(*Vendor) error) (*Vendor, error)

	CreateKey(ctx context.Context, k *Key) error
	GetKey(ctx context.Context, id string) (*Key, error)
	GetKeyByHash(ctx context.Context, hash string) (*Key, error)
	// ListKeys lists a vendor's keys, oldest first.
	ListKeys(ctx context.Context, vendorID string) ([]*Key, error)
	// RevokeKey sets revoked_at when it is not set yet and returns the key.
	RevokeKey(ctx context.Context, id string, at time.Time) (*Key, error)
	// RotateKey locks the key id, lets fn check it and return its
	// successor (fn sets old.ReplacedBy and old.RevokeAt), then inserts the
	// successor and saves the old key's replaced_by and revoke_at, in one
	// transaction: of two rotations of one key at once, on any replica, the
	// second sees the first's. fn's error aborts and is returned.
	RotateKey(ctx context.Context, id string, fn func(old *Key) (*Key, error)) (old, next *Key, err error)
	// DueRevocations lists the keys whose RevokeAt is at or before now and
	// that are not revoked yet, soonest first, at most limit.
	DueRevocations(ctx context.Context, now time.Time, limit int) ([]string, error)
	// ExpiringKeys lists every vendor's keys not revoked whose ExpiresAt is
	// after after and before before, soonest first.
	ExpiringKeys(ctx context.Context, after, before time.Time) ([]*Key, error)
	// CountVendorsExpiring counts approved live vendors that have a key not
	// revoked and none of whose keys not revoked expires after t.
	CountVendorsExpiring(ctx context.Context, t time.Time) (int, error)

	// ReserveIdempotency inserts rec with no order yet. When the vendor
	// already used the key it inserts nothing and returns the existing
	// record; a unique constraint decides races.
	ReserveIdempotency(ctx context.Context, rec Idempotency) (existing *Idempotency, err error)
	// TakeOverIdempotency replaces abandoned (a record whose placement
	// crashed, as ReserveIdempotency returned it) by rec, only if the record
	// is still exactly abandoned: no order, the same request hash and
	// created_at. A compare-and-swap, not a delete then an insert, so of
	// several placements taking one record over at once exactly one wins;
	// the others get false and must not place an order.
	TakeOverIdempotency(ctx context.Context, abandoned, rec Idempotency) (won bool, err error)
	// DropIdempotency removes a record whose order was never placed.
	DropIdempotency(ctx context.Context, vendorID, key string) error
	// CreateOrder inserts o and its services and, when idemKey is not empty,
	// points the vendor's idempotency record at it: one transaction.
	CreateOrder(ctx context.Context, o *Order, idemKey string) error
	GetOrder(ctx context.Context, id string) (*Order, error)
	// ListOrders lists a vendor's orders newest first, after cursor when it
	// is not nil, at most limit.
	ListOrders(ctx context.Context, vendorID string, after *Cursor, limit int) ([]*Order, error)
	// SearchOrders lists every vendor's orders that f keeps, newest first,
	// after cursor when it is not nil, at most limit: the staff's queue.
	SearchOrders(ctx context.Context, f OrderFilter, after *Cursor, limit int) ([]*Order, error)
	// UpdateOrder loads the order, lets fn change it and saves the order and
	// its services, in one transaction. fn's error aborts and is returned.
	UpdateOrder(ctx context.Context, id string, fn func(*Order) error) (*Order, error)
	// DueSandboxOrders lists orders whose NextStepAt is at or before now.
	DueSandboxOrders(ctx context.Context, now time.Time, limit int) ([]string, error)
	// UnfinishedBefore lists orders not final and created before t.
	UnfinishedBefore(ctx context.Context, t time.Time, limit int) ([]string, error)
	// CountOrdersByStatus counts every order by its stored status.
	CountOrdersByStatus(ctx context.Context) (map[string]int, error)

	// AppendAudit inserts one audit record. There is no method that
	// changes one: the trail is append-only.
	AppendAudit(ctx context.Context, r *AuditRecord) error
	// ListAudit lists the audit records f selects, newest first.
	ListAudit(ctx context.Context, f AuditFilter) ([]*AuditRecord, error)
	// DeleteAuditBefore deletes the audit records older than t, the
	// retention sweep's only, and returns how many.
	DeleteAuditBefore(ctx context.Context, t time.Time) (int, error)

	// ServiceUsage counts the services of the orders placed in [from, to)
	// per vendor, environment and service; vendorID "" is every vendor.
	ServiceUsage(ctx context.Context, vendorID string, from, to time.Time) ([]ServiceUsage, error)
	// ApplyUsageFlush adds a gateway flush to the daily totals once per
	// flush id; applied is false for an id applied before.
	ApplyUsageFlush(ctx context.Context, f UsageFlush) (applied bool, err error)
	// GatewayUsage sums the daily totals of days in [fromDay, toDay) per
	// vendor and policy; vendorID "" is every vendor.
	GatewayUsage(ctx context.Context, vendorID, fromDay, toDay string) ([]GatewayUsage, error)
	// EnqueueBillable puts the billable services of orders placed at or
	// after since into the export outbox, once each.
	EnqueueBillable(ctx context.Context, since, now time.Time) error
	// DueBillingEvents lists the outbox's unsent events due at now.
	DueBillingEvents(ctx context.Context, now time.Time, limit int) ([]*BillingEvent, error)
	// MarkBillingSent records events as sent.
	MarkBillingSent(ctx context.Context, ids []string, at time.Time) error
	// RetryBillingEvents counts a failed attempt and sets the next one.
	RetryBillingEvents(ctx context.Context, ids []string, next time.Time) error
	// CountBillingOutbox counts the events waiting to be sent.
	CountBillingOutbox(ctx context.Context) (int, error)
}
