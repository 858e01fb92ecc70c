// Package orders is the order domain: placement (validation, mc_number
// normalisation, idempotency, refusals), the order object as the
// specification gives it (status derivation, safety score, poll), the
// lifecycle (sandbox steps, staff actions, the deadline) and reports.
package orders

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"os"
	"time"

	"github.com/google/uuid"

	"vendorgate/backend/orders/score"
	"vendorgate/backend/reports"
	"vendorgate/backend/store"
	"vendorgate/shared/apierr"
	"vendorgate/shared/wire"
)

// Observer is told about what metrics count; *metrics.Metrics satisfies it.
type Observer interface {
	OrderCreated(environment string)
	SimulatorStep(service, outcome string)
}

// waitOnStaff is poll.after_seconds while an order waits on staff (held,
// live, or a stalled sandbox order): a constant of the API's answers, not
// a setting.
const waitOnStaff = 60 * time.Second

// placingTimeout is how long an idempotency record may stay "being placed"
// before it is taken as abandoned (a crash mid-placement): a constant of
// the domain, not a setting.
const placingTimeout = 30 * time.Second

// Options configure a Service.
type Options struct {
	Store   store.Store
	Reports *reports.Store
	// PublicBaseURL is the gateway's address for poll.url, Location and
	// file_url.
	PublicBaseURL string
	// Deadline closes unfinished orders. Required (its default, 48h, is
	// config's).
	Deadline time.Duration
	// SandboxDelay is one step of the sandbox provider. 0 steps at once.
	SandboxDelay time.Duration
	// MVRUnavailableStates answer 422 mvr_state_unavailable for an MVR.
	MVRUnavailableStates []string
	// Observer may be nil.
	Observer Observer
	// Now is the clock. Default time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

// Service is the order domain.
type Service struct {
	o           Options
	unavailable map[string]bool
}

// New builds a Service.
func New(o Options) (*Service, error) {
	if o.Store == nil || o.Reports == nil {
		return nil, errors.New("orders: store and reports are required")
	}
	if o.Deadline <= 0 {
		return nil, errors.New("orders: a positive deadline is required (config.Backend.OrderDeadline, default 48h)")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	s := &Service{o: o, unavailable: map[string]bool{}}
	for _, st := range o.MVRUnavailableStates {
		s.unavailable[st] = true
	}
	return s, nil
}

func (s *Service) now() time.Time { return s.o.Now().UTC() }

func (s *Service) observe(f func(Observer)) {
	if s.o.Observer != nil {
		f(s.o.Observer)
	}
}

// errNotFound is the one answer for an order that does not exist, is not
// the caller's, or whose id is malformed: the same bytes for all three.
func errNotFound() *apierr.Error { return apierr.New(apierr.NotFound, "order not found") }

// load returns the caller's order or not_found.
func (s *Service) load(ctx context.Context, vendorID, orderID string) (*store.Order, error) {
	if uuid.Validate(orderID) != nil {
		return nil, errNotFound()
	}
	o, err := s.o.Store.GetOrder(ctx, orderID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && vendorID != "" && o.VendorID != vendorID) {
		return nil, errNotFound()
	}
	return o, err
}

// Get returns the caller's order as the specification's Order object.
func (s *Service) Get(ctx context.Context, vendorID, orderID string) (*wire.Order, error) {
	o, err := s.load(ctx, vendorID, orderID)
	if err != nil {
		return nil, err
	}
	v := s.View(o)
	return &v, nil
}

// Report opens a completed service's report for streaming. Anything that
// cannot be downloaded now answers not_found.
func (s *Service) Report(ctx context.Context, vendorID, orderID, service string) (*os.File, int64, error) {
	o, err := s.load(ctx, vendorID, orderID)
	if err != nil {
		return nil, 0, err
	}
	if identityHeld(o) {
		return nil, 0, apierr.New(apierr.NotFound, "report not available")
	}
	for _, sv := range o.Services {
		if sv.Name == service && sv.Status == wire.StatusCompleted && sv.ReportPath != "" && wire.HasReport(service) {
			f, size, err := s.o.Reports.Open(sv.ReportPath)
			if errors.Is(err, reports.ErrNoFile) {
				return nil, 0, apierr.New(apierr.NotFound, "report not available")
			}
			return f, size, err
		}
	}
	return nil, 0, apierr.New(apierr.NotFound, "report not available")
}

// derive sets the order's status and final from its services, by the
// specification's rules: under_review while any service is held; processing
// while any runs (an unknown status counts as running); otherwise completed,
// failed, or partially_completed (at least one of each).
func derive(o *store.Order) {
	held, running, completed, failed := false, false, 0, 0
	for _, sv := range o.Services {
		switch sv.Status {
		case wire.StatusUnderReview:
			held = true
		case wire.StatusCompleted:
			completed++
		case wire.StatusFailed:
			failed++
		default:
			running = true
		}
	}
	o.Final = !held && !running
	switch {
	case held:
		o.Status = wire.StatusUnderReview
	case running:
		o.Status = wire.StatusProcessing
	case failed == 0:
		o.Status = wire.StatusCompleted
	case completed == 0:
		o.Status = wire.StatusFailed
	default:
		o.Status = wire.StatusPartiallyCompleted
	}
	if o.Final {
		o.NextStepAt = nil
	}
}

// identityHeld reports whether the MVR names another person: then nothing
// of the order is served until staff release it.
func identityHeld(o *store.Order) bool {
	for _, sv := range o.Services {
		if sv.Name == wire.MVR && sv.Status == wire.StatusUnderReview && sv.Reason != nil && *sv.Reason == wire.ReasonIdentityReview {
			return true
		}
	}
	return false
}

// URL is the order's address at the gateway.
func (s *Service) URL(orderID string) string {
	return s.o.PublicBaseURL + "/api/vendor/v1/orders/" + orderID
}

// View is the Order object of o now.
func (s *Service) View(o *store.Order) wire.Order {
	hide := identityHeld(o)
	out := wire.Order{
		OrderID: o.ID, Status: o.Status, Final: o.Final, Environment: o.Environment,
		MCNumber: o.MCNumber, ExternalReference: o.ExternalReference,
		CreatedAt: o.CreatedAt.Truncate(time.Second), Services: make([]wire.ServiceEntry, 0, len(o.Services)),
		Poll: wire.Poll{URL: s.URL(o.ID), AfterSeconds: s.afterSeconds(o)},
	}
	for _, sv := range o.Services {
		e := wire.ServiceEntry{Service: sv.Name, Status: sv.Status, Reason: sv.Reason}
		if sv.Name == wire.MVR {
			st := o.Driver.LicenseState
			e.State = &st
		}
		if sv.CompletedAt != nil {
			t := sv.CompletedAt.Truncate(time.Second)
			e.CompletedAt = &t
		}
		if sv.Status == wire.StatusCompleted && !hide {
			if wire.HasReport(sv.Name) && sv.ReportPath != "" {
				u := s.URL(o.ID) + "/reports/" + sv.Name
				e.FileURL = &u
			}
			if sv.Name == wire.DriverReviews {
				e.Result = sv.Result
			}
		}
		out.Services = append(out.Services, e)
	}
	out.SafetyScore = score.Of(o)
	return out
}

// afterSeconds is when the order is next expected to change: the next
// sandbox step, else (waiting on staff or a stalled provider) waitOnStaff,
// never past the deadline; 0 once final.
func (s *Service) afterSeconds(o *store.Order) int {
	if o.Final {
		return 0
	}
	now := s.now()
	wait := waitOnStaff
	if o.NextStepAt != nil {
		wait = o.NextStepAt.Sub(now)
	}
	if d := o.CreatedAt.Add(s.o.Deadline).Sub(now); d < wait {
		wait = d
	}
	secs := int(math.Ceil(wait.Seconds()))
	if secs < 1 {
		secs = 1
	}
	return secs
}

// RetryAfter is the Retry-After of a running order: after_seconds, at least 1.
func RetryAfter(o *wire.Order) int {
	if o.Poll.AfterSeconds < 1 {
		return 1
	}
	return o.Poll.AfterSeconds
}
