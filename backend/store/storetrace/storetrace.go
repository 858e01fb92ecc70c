// Package storetrace makes a span of each store call made under a traced
// request: the backend's server span then shows where its time went. A
// call with no span in its context (the sweeper, the sandbox runner, the
// admin API without a trace) makes none. Methods it does not list pass
// through to the store untraced.
package storetrace

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"vendorgate/backend/store"
)

var _ store.Store = (*Store)(nil)

// Store is a store.Store whose calls are spans.
type Store struct {
	store.Store
	tracer trace.Tracer
	system string
}

// New wraps st; system names the database in the spans ("sqlite",
// "postgresql").
func New(st store.Store, tracer trace.Tracer, system string) *Store {
	return &Store{Store: st, tracer: tracer, system: system}
}

// start begins the span of one call when ctx is in a trace; end is a
// no-op otherwise.
func (s *Store) start(ctx context.Context, op string) (context.Context, trace.Span) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, nil
	}
	return s.tracer.Start(ctx, "store "+op, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("db.system.name", s.system), attribute.String("db.operation.name", op)))
}

func end(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// CreateVendor is store.Store's, in a span.
func (s *Store) CreateVendor(ctx context.Context, v *store.Vendor) error {
	ctx, span := s.start(ctx, "CreateVendor")
	err := s.Store.CreateVendor(ctx, v)
	end(span, err)
	return err
}

// GetVendor is store.Store's, in a span.
func (s *Store) GetVendor(ctx context.Context, id string) (*store.Vendor, error) {
	ctx, span := s.start(ctx, "GetVendor")
	v, err := s.Store.GetVendor(ctx, id)
	end(span, err)
	return v, err
}

// ListVendors is store.Store's, in a span.
func (s *Store) ListVendors(ctx context.Context) ([]*store.Vendor, error) {
	ctx, span := s.start(ctx, "ListVendors")
	v, err := s.Store.ListVendors(ctx)
	end(span, err)
	return v, err
}

// UpdateVendor is store.Store's, in a span.
func (s *Store) UpdateVendor(ctx context.Context, id string, fn func(*store.Vendor) error) (*store.Vendor, error) {
	ctx, span := s.start(ctx, "UpdateVendor")
	v, err := s.Store.UpdateVendor(ctx, id, fn)
	end(span, err)
	return v, err
}

// CreateKey is store.Store's, in a span.
func (s *Store) CreateKey(ctx context.Context, k *store.Key) error {
	ctx, span := s.start(ctx, "CreateKey")
	err := s.Store.CreateKey(ctx, k)
	end(span, err)
	return err
}

// GetKey is store.Store's, in a span.
func (s *Store) GetKey(ctx context.Context, id string) (*store.Key, error) {
	ctx, span := s.start(ctx, "GetKey")
	v, err := s.Store.GetKey(ctx, id)
	end(span, err)
	return v, err
}

// GetKeyByHash is store.Store's, in a span.
func (s *Store) GetKeyByHash(ctx context.Context, hash string) (*store.Key, error) {
	ctx, span := s.start(ctx, "GetKeyByHash")
	v, err := s.Store.GetKeyByHash(ctx, hash)
	end(span, err)
	return v, err
}

// ListKeys is store.Store's, in a span.
func (s *Store) ListKeys(ctx context.Context, vendorID string) ([]*store.Key, error) {
	ctx, span := s.start(ctx, "ListKeys")
	v, err := s.Store.ListKeys(ctx, vendorID)
	end(span, err)
	return v, err
}

// RevokeKey is store.Store's, in a span.
func (s *Store) RevokeKey(ctx context.Context, id string, at time.Time) (*store.Key, error) {
	ctx, span := s.start(ctx, "RevokeKey")
	v, err := s.Store.RevokeKey(ctx, id, at)
	end(span, err)
	return v, err
}

// ReserveIdempotency is store.Store's, in a span.
func (s *Store) ReserveIdempotency(ctx context.Context, rec store.Idempotency) (*store.Idempotency, error) {
	ctx, span := s.start(ctx, "ReserveIdempotency")
	v, err := s.Store.ReserveIdempotency(ctx, rec)
	end(span, err)
	return v, err
}

// TakeOverIdempotency is store.Store's, in a span.
func (s *Store) TakeOverIdempotency(ctx context.Context, abandoned, rec store.Idempotency) (bool, error) {
	ctx, span := s.start(ctx, "TakeOverIdempotency")
	v, err := s.Store.TakeOverIdempotency(ctx, abandoned, rec)
	end(span, err)
	return v, err
}

// DropIdempotency is store.Store's, in a span.
func (s *Store) DropIdempotency(ctx context.Context, vendorID, key string) error {
	ctx, span := s.start(ctx, "DropIdempotency")
	err := s.Store.DropIdempotency(ctx, vendorID, key)
	end(span, err)
	return err
}

// CreateOrder is store.Store's, in a span.
func (s *Store) CreateOrder(ctx context.Context, o *store.Order, idemKey string) error {
	ctx, span := s.start(ctx, "CreateOrder")
	err := s.Store.CreateOrder(ctx, o, idemKey)
	end(span, err)
	return err
}

// GetOrder is store.Store's, in a span.
func (s *Store) GetOrder(ctx context.Context, id string) (*store.Order, error) {
	ctx, span := s.start(ctx, "GetOrder")
	v, err := s.Store.GetOrder(ctx, id)
	end(span, err)
	return v, err
}

// ListOrders is store.Store's, in a span.
func (s *Store) ListOrders(ctx context.Context, vendorID string, after *store.Cursor, limit int) ([]*store.Order, error) {
	ctx, span := s.start(ctx, "ListOrders")
	v, err := s.Store.ListOrders(ctx, vendorID, after, limit)
	end(span, err)
	return v, err
}

// UpdateOrder is store.Store's, in a span.
func (s *Store) UpdateOrder(ctx context.Context, id string, fn func(*store.Order) error) (*store.Order, error) {
	ctx, span := s.start(ctx, "UpdateOrder")
	v, err := s.Store.UpdateOrder(ctx, id, fn)
	end(span, err)
	return v, err
}

// CountOrdersByStatus is store.Store's, in a span.
func (s *Store) CountOrdersByStatus(ctx context.Context) (map[string]int, error) {
	ctx, span := s.start(ctx, "CountOrdersByStatus")
	v, err := s.Store.CountOrdersByStatus(ctx)
	end(span, err)
	return v, err
}
