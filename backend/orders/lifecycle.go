package orders

import (
	"context"
	"errors"
	"fmt"
	"time"

	"vendorgate/backend/orders/placement"
	"vendorgate/backend/reports"
	"vendorgate/backend/sandbox"
	"vendorgate/backend/store"
	"vendorgate/shared/apierr"
	"vendorgate/shared/wire"
)

// batch bounds the orders one sandbox or sweeper run works.
const batch = 200

func ptr(s string) *string { return &s }

// expired reports whether o is past its deadline.
func (s *Service) expired(o *store.Order, now time.Time) bool {
	return !now.Before(o.CreatedAt.Add(s.o.Deadline))
}

// closeAtDeadline fails every unfinished service at the deadline: held for
// identity_review becomes identity_unverified, anything else timed_out.
func closeAtDeadline(o *store.Order) {
	for i := range o.Services {
		sv := &o.Services[i]
		if sv.Status == wire.StatusCompleted || sv.Status == wire.StatusFailed {
			continue
		}
		reason := wire.ReasonTimedOut
		if sv.Status == wire.StatusUnderReview && sv.Reason != nil && *sv.Reason == wire.ReasonIdentityReview {
			reason = wire.ReasonIdentityUnverified
		}
		sv.Status, sv.Reason = wire.StatusFailed, ptr(reason)
	}
	o.NextStepAt = nil
	derive(o)
}

// CloseExpired closes every unfinished order past its deadline and returns
// how many it closed. The sweeper calls it.
func (s *Service) CloseExpired(ctx context.Context) (int, error) {
	now := s.now()
	// An order is expired from the very instant of its deadline: +1ns makes
	// "created before" include it.
	ids, err := s.o.Store.UnfinishedBefore(ctx, now.Add(-s.o.Deadline).Add(time.Nanosecond), batch)
	if err != nil {
		return 0, err
	}
	closed := 0
	for _, id := range ids {
		changed := false
		_, err := s.o.Store.UpdateOrder(ctx, id, func(o *store.Order) error {
			if o.Final || !s.expired(o, now) {
				return nil
			}
			closeAtDeadline(o)
			changed = true
			return nil
		})
		if err != nil {
			return closed, fmt.Errorf("close order %s: %w", id, err)
		}
		if changed {
			closed++
			s.o.Logger.Info("order closed at its deadline", "order_id", id)
		}
	}
	return closed, nil
}

// StepSandbox works every sandbox order whose next step is due: each
// running service takes one step of the simulated provider. It returns how
// many orders it worked.
func (s *Service) StepSandbox(ctx context.Context) (int, error) {
	now := s.now()
	ids, err := s.o.Store.DueSandboxOrders(ctx, now, batch)
	if err != nil {
		return 0, err
	}
	worked := 0
	for _, id := range ids {
		var steps []string
		_, err := s.o.Store.UpdateOrder(ctx, id, func(o *store.Order) error {
			steps = steps[:0]
			if o.Final || o.NextStepAt == nil || o.NextStepAt.After(now) {
				return nil
			}
			if s.expired(o, now) {
				closeAtDeadline(o) // a result after the deadline is recorded nowhere
				return nil
			}
			more := false
			for i := range o.Services {
				sv := &o.Services[i]
				if sv.Status != wire.StatusProcessing {
					continue
				}
				sv.Steps++
				out := sandbox.Step(o.Driver.LicenseNumber, sv.Name, sv.Steps)
				if err := s.apply(o, sv, out, now); err != nil {
					return err
				}
				steps = append(steps, sv.Name, out.Label())
				more = more || sv.Status == wire.StatusProcessing
			}
			o.NextStepAt = nil
			if more {
				next := now.Add(s.o.SandboxDelay)
				o.NextStepAt = &next
			}
			derive(o)
			return nil
		})
		if err != nil {
			return worked, fmt.Errorf("sandbox step of order %s: %w", id, err)
		}
		for i := 0; i+1 < len(steps); i += 2 {
			svc, outcome := steps[i], steps[i+1]
			s.observe(func(ob Observer) { ob.SimulatorStep(svc, outcome) })
		}
		worked++
	}
	return worked, nil
}

// apply records a provider outcome on one service.
func (s *Service) apply(o *store.Order, sv *store.Service, out sandbox.Outcome, now time.Time) error {
	switch out.Kind {
	case sandbox.Fail:
		sv.Status, sv.Reason = wire.StatusFailed, ptr(out.Reason)
	case sandbox.Hold:
		sv.Status, sv.Reason = wire.StatusUnderReview, ptr(out.Reason)
	case sandbox.Unavailable:
		sv.Status, sv.Reason = wire.StatusProcessing, ptr(out.Reason)
	default:
		return s.complete(o, sv, nil, out.Reviews, now)
	}
	return nil
}

// complete finishes a service: a report service gets its PDF (pdf as given,
// or generated), driver_reviews its result (none found when nil).
func (s *Service) complete(o *store.Order, sv *store.Service, pdf []byte, result *wire.ReviewsResult, now time.Time) error {
	if wire.HasReport(sv.Name) {
		var path string
		var err error
		if pdf != nil {
			path, err = s.o.Reports.Write(o.ID, sv.Name, pdf)
		} else {
			path, err = s.o.Reports.Generate(reports.Info{OrderID: o.ID, Service: sv.Name, Environment: o.Environment,
				MCNumber: o.MCNumber, DriverName: o.Driver.FirstName + " " + o.Driver.LastName,
				LicenseNumber: o.Driver.LicenseNumber, LicenseState: o.Driver.LicenseState, CompletedAt: now})
		}
		if err != nil {
			return err
		}
		sv.ReportPath = path
	}
	if sv.Name == wire.DriverReviews {
		if result == nil {
			result = sandbox.NoReviewsResult()
		}
		if result.Reviews == nil {
			result.Reviews = []wire.Review{}
		}
		sv.Result = result
	}
	t := now
	sv.Status, sv.Reason, sv.CompletedAt = wire.StatusCompleted, nil, &t
	return nil
}

// conflict is the answer to a staff transition that is not allowed:
// request_failed, which the admin API sends as a 409.
func conflict(format string, args ...any) *apierr.Error {
	return apierr.New(apierr.RequestFailed, format, args...)
}

func fieldError(field, msg string) *apierr.Error {
	return placement.ValidationError(map[string]string{field: msg})
}

// staff runs one staff action on an order. An order past its deadline is
// closed first, so a late result finds its services final and is refused:
// it never reopens the order.
func (s *Service) staff(ctx context.Context, id string, act func(o *store.Order, now time.Time) error) (string, *wire.Order, error) {
	now := s.now()
	o, err := s.load(ctx, "", id)
	if err != nil {
		return "", nil, err
	}
	if !o.Final && s.expired(o, now) {
		if _, err := s.o.Store.UpdateOrder(ctx, id, func(o *store.Order) error {
			if !o.Final {
				closeAtDeadline(o)
			}
			return nil
		}); err != nil {
			return "", nil, err
		}
	}
	o, err = s.o.Store.UpdateOrder(ctx, id, func(o *store.Order) error {
		if err := act(o, now); err != nil {
			return err
		}
		derive(o)
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return "", nil, errNotFound()
	}
	if err != nil {
		return "", nil, err
	}
	v := s.View(o)
	return o.VendorID, &v, nil
}

func findService(o *store.Order, name string) (*store.Service, *apierr.Error) {
	if name == "" {
		return nil, fieldError("service", "required")
	}
	for i := range o.Services {
		if o.Services[i].Name == name {
			return &o.Services[i], nil
		}
	}
	return nil, fieldError("service", fmt.Sprintf("the order has no service %q", name))
}

func isFinal(sv *store.Service) bool {
	return sv.Status == wire.StatusCompleted || sv.Status == wire.StatusFailed
}

// AdminGet returns any order with its vendor, for staff.
func (s *Service) AdminGet(ctx context.Context, id string) (string, *wire.Order, error) {
	o, err := s.load(ctx, "", id)
	if err != nil {
		return "", nil, err
	}
	v := s.View(o)
	return o.VendorID, &v, nil
}

// Release lets held results through: the named service, or every held one
// when service is empty. A released service completes (its report served).
func (s *Service) Release(ctx context.Context, id, service string) (string, *wire.Order, error) {
	return s.staff(ctx, id, func(o *store.Order, now time.Time) error {
		released := 0
		for i := range o.Services {
			sv := &o.Services[i]
			if service != "" && sv.Name != service {
				continue
			}
			if sv.Status != wire.StatusUnderReview {
				continue
			}
			if err := s.complete(o, sv, nil, s.heldResult(o, sv), now); err != nil {
				return err
			}
			released++
		}
		if service != "" {
			if _, err := findService(o, service); err != nil {
				return err
			}
		}
		if released == 0 {
			return notHeld(o, service)
		}
		s.o.Logger.Info("order released", "order_id", o.ID, "service", service)
		return nil
	})
}

// heldResult is the result a released driver_reviews service carries: the
// sandbox provider's, or none found for a live order.
func (s *Service) heldResult(o *store.Order, sv *store.Service) *wire.ReviewsResult {
	if sv.Name == wire.DriverReviews && o.Environment == "sandbox" {
		return sandbox.Step(o.Driver.LicenseNumber, sv.Name, 1).Reviews
	}
	return nil
}

// Complete records a result staff post for a service that is not final.
func (s *Service) Complete(ctx context.Context, id, service string, pdf []byte, result *wire.ReviewsResult) (string, *wire.Order, error) {
	if pdf != nil && !wire.HasReport(service) {
		return "", nil, fieldError("report_pdf_base64", "only mvr, psp and cdlis have a report")
	}
	if result != nil && service != wire.DriverReviews {
		return "", nil, fieldError("result", "only driver_reviews has a result")
	}
	if result != nil {
		for _, r := range result.Reviews {
			if r.Date == nil {
				continue
			}
			if _, err := time.Parse("2006-01-02", *r.Date); err != nil {
				return "", nil, fieldError("result", "a review date must be YYYY-MM-DD or null")
			}
		}
	}
	return s.staff(ctx, id, func(o *store.Order, now time.Time) error {
		sv, err := findService(o, service)
		if err != nil {
			return err
		}
		if isFinal(sv) {
			return conflict("service %s of this order is already %s", service, sv.Status)
		}
		s.o.Logger.Info("service completed by staff", "order_id", o.ID, "service", service)
		return s.complete(o, sv, pdf, result, now)
	})
}

// failReasons are the reasons staff may fail a service with.
var failReasons = map[string]bool{wire.ReasonProviderFailed: true, wire.ReasonNoRecord: true,
	wire.ReasonNoReport: true, wire.ReasonTimedOut: true, wire.ReasonIdentityUnverified: true,
	wire.ReasonRecordDeleted: true}

// Fail records that a service failed, with reason.
func (s *Service) Fail(ctx context.Context, id, service, reason string) (string, *wire.Order, error) {
	if !failReasons[reason] {
		return "", nil, fieldError("reason", "one of provider_failed, no_record, no_report, timed_out, identity_unverified, record_deleted")
	}
	return s.staff(ctx, id, func(o *store.Order, now time.Time) error {
		sv, err := findService(o, service)
		if err != nil {
			return err
		}
		if isFinal(sv) {
			return conflict("service %s of this order is already %s", service, sv.Status)
		}
		sv.Status, sv.Reason = wire.StatusFailed, ptr(reason)
		s.o.Logger.Info("service failed by staff", "order_id", o.ID, "service", service, "reason", reason)
		return nil
	})
}

// Delete deletes an order's data on request: unfinished services fail
// record_deleted, report files and results are removed.
func (s *Service) Delete(ctx context.Context, id string) (string, *wire.Order, error) {
	return s.staff(ctx, id, func(o *store.Order, now time.Time) error {
		for i := range o.Services {
			sv := &o.Services[i]
			if !isFinal(sv) {
				sv.Status, sv.Reason = wire.StatusFailed, ptr(wire.ReasonRecordDeleted)
			}
			sv.ReportPath, sv.Result = "", nil
		}
		o.NextStepAt = nil
		if err := s.o.Reports.RemoveOrder(o.ID); err != nil {
			return err
		}
		s.o.Logger.Info("order data deleted", "order_id", o.ID)
		return nil
	})
}
