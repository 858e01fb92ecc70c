package orders

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/google/uuid"

	"vendorgate/backend/orders/placement"
	"vendorgate/backend/sandbox"
	"vendorgate/backend/store"
	"vendorgate/shared/apierr"
	"vendorgate/shared/apikey"
	"vendorgate/shared/sandboxvalues"
	"vendorgate/shared/wire"
)

// PriceUnavailableMC is the sandbox test value that answers 503
// price_unavailable: an mc_number whose digits are 99999999.
const PriceUnavailableMC = sandboxvalues.PriceUnavailableMC

// Place places an order for vendor, or answers a refusal as an
// *apierr.Error. The same Idempotency-Key with the same request answers the
// order it placed.
func (s *Service) Place(ctx context.Context, v *store.Vendor, idemKey string, body []byte) (*wire.Order, error) {
	switch v.Status {
	case wire.VendorSuspended:
		return nil, apierr.New(apierr.AccountSuspended, "this account is suspended: orders are refused, results can still be read")
	case wire.VendorApproved:
	default:
		return nil, apierr.New(apierr.AccountNotApproved, "staff have not approved this account yet")
	}
	p, verr := placement.Parse(idemKey, body, s.now())
	if verr != nil {
		return nil, verr
	}
	enabled := map[string]bool{}
	for _, e := range v.EnabledServices {
		enabled[e] = true
	}
	for _, name := range p.Services {
		if !enabled[name] {
			return nil, apierr.New(apierr.ServiceNotEnabled, "service %s is not enabled for this account", name)
		}
	}
	if contains(p.Services, wire.MVR) && s.unavailable[p.Driver.LicenseState] {
		return nil, apierr.New(apierr.MVRStateUnavailable, "an MVR cannot be ordered for license state %s through this API", p.Driver.LicenseState)
	}
	if p.MCNumber == PriceUnavailableMC {
		return nil, apierr.New(apierr.PriceUnavailable, "a service cannot be priced right now; try again later")
	}
	canon, _ := json.Marshal(p)
	sum := sha256.Sum256(canon)
	hash := hex.EncodeToString(sum[:])
	now := s.now()

	rec := store.Idempotency{VendorID: v.ID, Key: idemKey, RequestHash: hash, CreatedAt: now}
	existing, err := s.o.Store.ReserveIdempotency(ctx, rec)
	if err != nil {
		return nil, err
	}
	if existing != nil && existing.OrderID == "" {
		// A placement that crashed midway: take the key over, unless
		// another retry took it over first (then that one is placing).
		won := false
		if now.Sub(existing.CreatedAt) > placingTimeout {
			if won, err = s.o.Store.TakeOverIdempotency(ctx, *existing, rec); err != nil {
				return nil, err
			}
		}
		if !won {
			return nil, apierr.New(apierr.InProgress, "an order with this Idempotency-Key is still being placed")
		}
		existing = nil
	}
	if existing != nil {
		if existing.RequestHash != hash {
			e := apierr.New(apierr.IdempotencyConflict, "this Idempotency-Key was already used for a different order")
			e.OrderID = existing.OrderID
			return nil, e
		}
		return s.Get(ctx, v.ID, existing.OrderID)
	}

	o := s.newOrder(v, p, now)
	if err := s.o.Store.CreateOrder(ctx, o, idemKey); err != nil {
		if derr := s.o.Store.DropIdempotency(ctx, v.ID, idemKey); derr != nil {
			s.o.Logger.ErrorContext(ctx, "drop idempotency record", "vendor_id", v.ID, "error", derr)
		}
		return nil, err
	}
	s.observe(func(ob Observer) { ob.OrderCreated(o.Environment) })
	s.o.Logger.InfoContext(ctx, "order placed", "vendor_id", v.ID, "order_id", o.ID, "environment", o.Environment, "services", p.Services)
	view := s.View(o)
	return &view, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (s *Service) newOrder(v *store.Vendor, p *placement.Request, now time.Time) *store.Order {
	o := &store.Order{ID: uuid.NewString(), VendorID: v.ID, Environment: v.Environment, MCNumber: p.MCNumber,
		ExternalReference: p.ExternalReference, Driver: p.Driver, CreatedAt: now}
	for _, name := range p.Services {
		o.Services = append(o.Services, store.Service{Name: name, Status: wire.StatusProcessing})
	}
	if v.Environment == apikey.Sandbox && !sandbox.Stalls(p.Driver.LicenseNumber) {
		next := now.Add(s.o.SandboxDelay)
		o.NextStepAt = &next
	}
	derive(o)
	return o
}
