// Package audit writes the audit trail: one record per admin action and
// per report download, ids only (never driver data), appended to the
// backend's database and deleted only by retention (Sweep).
package audit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"vendorgate/backend/store"
)

// Record is the admin view of one audit record, as GET /admin/v1/audit
// answers it (and vendorctl audit reads it). An id that does not apply is
// null.
type Record struct {
	ID        string    `json:"id"`
	At        time.Time `json:"at"`
	Actor     string    `json:"actor"`
	Action    string    `json:"action"`
	VendorID  *string   `json:"vendor_id"`
	KeyID     *string   `json:"key_id"`
	OrderID   *string   `json:"order_id"`
	Service   *string   `json:"service"`
	Address   string    `json:"address"`
	RequestID *string   `json:"request_id"`
}

// View is r as the admin API answers it.
func View(r *store.AuditRecord) Record {
	return Record{ID: r.ID, At: r.At, Actor: r.Actor, Action: r.Action, VendorID: orNull(r.VendorID), KeyID: orNull(r.KeyID),
		OrderID: orNull(r.OrderID), Service: orNull(r.Service), Address: r.Address, RequestID: orNull(r.RequestID)}
}

// orNull is s, or nil for "".
func orNull(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// The actions recorded, as Action holds them.
const (
	VendorCreated    = "vendor.created"
	VendorApproved   = "vendor.approved"
	VendorSuspended  = "vendor.suspended"
	VendorReinstated = "vendor.reinstated"
	VendorServices   = "vendor.services_changed"
	KeyIssued        = "key.issued"
	KeyRotated       = "key.rotated"
	KeyRevoked       = "key.revoked"
	// KeyRevokedScheduled is the revocation at the end of a rotation's
	// overlap, made by the backend (Actor System).
	KeyRevokedScheduled = "key.revoked_scheduled"
	OrderReleased       = "order.released"
	OrderCompleted      = "order.completed"
	OrderFailed         = "order.failed"
	OrderDeleted        = "order.deleted"
	ReportDownloaded    = "report.downloaded"
)

// Actions lists every action, in the order above.
var Actions = []string{VendorCreated, VendorApproved, VendorSuspended, VendorReinstated, VendorServices,
	KeyIssued, KeyRotated, KeyRevoked, KeyRevokedScheduled, OrderReleased, OrderCompleted, OrderFailed, OrderDeleted,
	ReportDownloaded}

// Actors that are not an admin token's name.
const (
	// System is the backend acting on its own (a scheduled revocation).
	System = "system"
	// Vendor is a vendor's key downloading a report (KeyID names the key).
	Vendor = "vendor"
)

// Appender is what a Log needs of the store.
type Appender interface {
	AppendAudit(ctx context.Context, r *store.AuditRecord) error
	ListAudit(ctx context.Context, f store.AuditFilter) ([]*store.AuditRecord, error)
	DeleteAuditBefore(ctx context.Context, t time.Time) (int, error)
}

// Log appends audit records.
type Log struct {
	st        Appender
	now       func() time.Time
	retention time.Duration
}

// New returns a Log over st that keeps records for retention; now is the
// clock. All three are required.
func New(st Appender, now func() time.Time, retention time.Duration) (*Log, error) {
	switch {
	case st == nil:
		return nil, errors.New("audit: no store")
	case now == nil:
		return nil, errors.New("audit: no clock")
	case retention <= 0:
		return nil, errors.New("audit: a positive retention is required (config.Backend.AuditRetention, default 400d)")
	}
	return &Log{st: st, now: now, retention: retention}, nil
}

// Record appends r, giving it an id and the time now.
func (l *Log) Record(ctx context.Context, r store.AuditRecord) error {
	r.ID = uuid.NewString()
	r.At = l.now().UTC()
	if err := l.st.AppendAudit(ctx, &r); err != nil {
		return fmt.Errorf("audit %s by %s: %w", r.Action, r.Actor, err)
	}
	return nil
}

// List lists the records f selects, newest first.
func (l *Log) List(ctx context.Context, f store.AuditFilter) ([]*store.AuditRecord, error) {
	return l.st.ListAudit(ctx, f)
}

// Sweep deletes the records older than the retention and returns how many.
func (l *Log) Sweep(ctx context.Context) (int, error) {
	return l.st.DeleteAuditBefore(ctx, l.now().Add(-l.retention))
}
