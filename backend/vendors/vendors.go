// Package vendors manages vendor accounts and their API keys: creation,
// approval, suspension, enabled services, key issue and revocation, and the
// key resolution the gateway asks for. Every change a gateway caches is
// announced through the Publisher.
package vendors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"

	"vendorgate/backend/store"
	"vendorgate/shared/apierr"
	"vendorgate/shared/apikey"
	"vendorgate/shared/wire"
)

// SeedCompanyName is the name of the vendor seeded for make run.
const SeedCompanyName = "Sandbox Demo Vendor"

// Publisher announces invalidations; *invalidate.Publisher satisfies it.
type Publisher interface {
	Publish(ctx context.Context, msg wire.Invalidation) error
}

// Options configure a Service.
type Options struct {
	Store store.Store
	// Prefixes are the key prefixes this deployment issues.
	Prefixes apikey.Prefixes
	// Signer signs every issued key. Required.
	Signer *apikey.Signer
	// KeyLifetime is the default lifetime of an issued key. Required (its
	// default, 90 days, is config's).
	KeyLifetime time.Duration
	// Publisher, when not nil, receives every invalidation.
	Publisher Publisher
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Service is the vendor and key domain.
type Service struct {
	o Options
}

// New builds a Service.
func New(o Options) (*Service, error) {
	if o.Store == nil {
		return nil, errors.New("vendors: no store")
	}
	if o.Signer == nil {
		return nil, errors.New("vendors: no key signer")
	}
	if err := o.Prefixes.Validate(); err != nil {
		return nil, err
	}
	if o.KeyLifetime <= 0 {
		return nil, errors.New("vendors: a positive key lifetime is required (config.Backend.KeyLifetime, default 90d)")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Service{o: o}, nil
}

func (s *Service) now() time.Time { return s.o.Now().UTC().Truncate(time.Second) }

// notFound maps a store miss to the API's not_found and passes other errors.
func notFound(err error, what string) error {
	if errors.Is(err, store.ErrNotFound) {
		return apierr.New(apierr.NotFound, "%s not found", what)
	}
	return err
}

// conflict is the answer to a transition that is not allowed:
// request_failed, which the admin API sends as a 409.
func conflict(format string, args ...any) *apierr.Error {
	return apierr.New(apierr.RequestFailed, format, args...)
}

// normaliseServices checks a list of service names: known, no duplicates.
// It returns them in the specification's order.
func normaliseServices(field string, in []string) ([]string, *apierr.Error) {
	seen := map[string]bool{}
	for _, s := range in {
		if !wire.IsService(s) {
			return nil, validation(field, fmt.Sprintf("unknown service %q (known: %s)", s, strings.Join(wire.Services(), ", ")))
		}
		if seen[s] {
			return nil, validation(field, fmt.Sprintf("service %q is listed twice", s))
		}
		seen[s] = true
	}
	out := []string{}
	for _, s := range wire.Services() {
		if seen[s] {
			out = append(out, s)
		}
	}
	return out, nil
}

func validation(field, msg string) *apierr.Error {
	e := apierr.New(apierr.ValidationError, "the request is not valid")
	e.Fields = map[string]string{field: msg}
	return e
}

// Create makes a pending vendor.
func (s *Service) Create(ctx context.Context, company, environment string, services []string) (*store.Vendor, error) {
	company = strings.TrimSpace(company)
	fields := map[string]string{}
	if company == "" || len(company) > 200 {
		fields["company_name"] = "required, at most 200 characters"
	}
	if environment != apikey.Sandbox && environment != apikey.Live {
		fields["environment"] = "must be sandbox or live"
	}
	svc, verr := normaliseServices("enabled_services", services)
	if verr != nil {
		fields["enabled_services"] = verr.Fields["enabled_services"]
	}
	if len(fields) > 0 {
		e := apierr.New(apierr.ValidationError, "the request is not valid")
		e.Fields = fields
		return nil, e
	}
	v := &store.Vendor{ID: uuid.NewString(), CompanyName: company, Environment: environment,
		Status: wire.VendorPending, EnabledServices: svc, CreatedAt: s.now()}
	if err := s.o.Store.CreateVendor(ctx, v); err != nil {
		return nil, err
	}
	s.o.Logger.Info("vendor created", "vendor_id", v.ID, "environment", environment)
	return v, nil
}

// Get returns one vendor.
func (s *Service) Get(ctx context.Context, id string) (*store.Vendor, error) {
	if uuid.Validate(id) != nil {
		return nil, apierr.New(apierr.NotFound, "vendor not found")
	}
	v, err := s.o.Store.GetVendor(ctx, id)
	if err != nil {
		return nil, notFound(err, "vendor")
	}
	return v, nil
}

// List returns every vendor, oldest first.
func (s *Service) List(ctx context.Context) ([]*store.Vendor, error) {
	return s.o.Store.ListVendors(ctx)
}

// transitions lists, for each action, the statuses it may start from; the
// target status itself is always allowed, so repeating an action is a no-op.
var transitions = map[string]struct {
	to   string
	from []string
}{
	"approve":   {wire.VendorApproved, []string{wire.VendorPending}},
	"suspend":   {wire.VendorSuspended, []string{wire.VendorApproved, wire.VendorPending}},
	"reinstate": {wire.VendorApproved, []string{wire.VendorSuspended}},
}

// SetStatus applies action (approve, suspend, reinstate) to a vendor and
// announces the vendor's state, changed or not, so that repeating an action
// whose announcement failed announces it again; published says whether the
// announcement reached Redis (false without a Publisher).
func (s *Service) SetStatus(ctx context.Context, id, action string) (v *store.Vendor, published bool, err error) {
	tr, ok := transitions[action]
	if !ok {
		return nil, false, fmt.Errorf("unknown vendor action %q", action)
	}
	if uuid.Validate(id) != nil {
		return nil, false, apierr.New(apierr.NotFound, "vendor not found")
	}
	changed := false
	v, err = s.o.Store.UpdateVendor(ctx, id, func(v *store.Vendor) error {
		if v.Status == tr.to {
			return nil
		}
		for _, f := range tr.from {
			if v.Status == f {
				v.Status, changed = tr.to, true
				return nil
			}
		}
		return conflict("cannot %s a vendor that is %s", action, v.Status)
	})
	if err != nil {
		return nil, false, notFound(err, "vendor")
	}
	if changed {
		s.o.Logger.Info("vendor status changed", "vendor_id", id, "status", v.Status)
	}
	return v, s.publish(ctx, wire.Invalidation{VendorID: id}), nil
}

// SetServices replaces a vendor's enabled services and announces it;
// published as for SetStatus.
func (s *Service) SetServices(ctx context.Context, id string, services []string) (v *store.Vendor, published bool, err error) {
	if services == nil {
		return nil, false, validation("enabled_services", "required: a list of service names (may be empty)")
	}
	svc, verr := normaliseServices("enabled_services", services)
	if verr != nil {
		return nil, false, verr
	}
	if uuid.Validate(id) != nil {
		return nil, false, apierr.New(apierr.NotFound, "vendor not found")
	}
	v, err = s.o.Store.UpdateVendor(ctx, id, func(v *store.Vendor) error {
		v.EnabledServices = svc
		return nil
	})
	if err != nil {
		return nil, false, notFound(err, "vendor")
	}
	s.o.Logger.Info("vendor services changed", "vendor_id", id, "enabled_services", svc)
	return v, s.publish(ctx, wire.Invalidation{VendorID: id}), nil
}

// IssueKey makes a key for a vendor. The raw key is returned once and is
// stored only as its hash. lifetime 0 means the default.
func (s *Service) IssueKey(ctx context.Context, vendorID string, lifetime time.Duration) (string, *store.Key, error) {
	if lifetime < 0 {
		return "", nil, validation("lifetime_seconds", "must be positive")
	}
	if lifetime == 0 {
		lifetime = s.o.KeyLifetime
	}
	v, err := s.Get(ctx, vendorID)
	if err != nil {
		return "", nil, err
	}
	raw, err := s.o.Signer.Generate(s.o.Prefixes, v.Environment)
	if err != nil {
		return "", nil, err
	}
	prefix, _ := s.o.Prefixes.For(v.Environment)
	now := s.now()
	k := &store.Key{ID: uuid.NewString(), VendorID: v.ID, Hash: apikey.Hash(raw), Prefix: prefix,
		Environment: v.Environment, CreatedAt: now, ExpiresAt: now.Add(lifetime).Truncate(time.Second)}
	if err := s.o.Store.CreateKey(ctx, k); err != nil {
		return "", nil, err
	}
	s.o.Logger.Info("key issued", "vendor_id", v.ID, "key_id", k.ID, "expires_at", k.ExpiresAt)
	return raw, k, nil
}

// ListKeys lists a vendor's keys, oldest first.
func (s *Service) ListKeys(ctx context.Context, vendorID string) ([]*store.Key, error) {
	if _, err := s.Get(ctx, vendorID); err != nil {
		return nil, err
	}
	return s.o.Store.ListKeys(ctx, vendorID)
}

// RevokeKey revokes a key (repeating it keeps the first time) and
// announces it so that gateways stop accepting it at once; repeating it
// announces it again. published says whether the announcement reached
// Redis (false without a Publisher).
func (s *Service) RevokeKey(ctx context.Context, keyID string) (k *store.Key, published bool, err error) {
	if uuid.Validate(keyID) != nil {
		return nil, false, apierr.New(apierr.NotFound, "key not found")
	}
	k, err = s.o.Store.RevokeKey(ctx, keyID, s.now())
	if err != nil {
		return nil, false, notFound(err, "key")
	}
	s.o.Logger.Info("key revoked", "vendor_id", k.VendorID, "key_id", k.ID)
	return k, s.publish(ctx, wire.Invalidation{KeyHash: k.Hash}), nil
}

// RotateKey issues a new key for the vendor of keyID, records the pair and
// schedules the old key's revocation at the end of overlap. overlap 0
// (a leaked key) revokes the old key now, through RevokeKey; a later one
// is revoked by RevokeDue, through RevokeKey too, so that a rotation's
// revocation is published as any revocation is. Until RevokeDue runs,
// Resolve already answers the old key revoked once its time has come: a
// gateway whose cached entry expires learns it at the latest then. A key
// revoked, expired or already rotated is not rotated (a conflict).
func (s *Service) RotateKey(ctx context.Context, keyID string, overlap time.Duration) (raw string, old, next *store.Key, published bool, err error) {
	if overlap < 0 {
		return "", nil, nil, false, validation("overlap_seconds", "must be 0 (revoke the old key now) or more")
	}
	if uuid.Validate(keyID) != nil {
		return "", nil, nil, false, apierr.New(apierr.NotFound, "key not found")
	}
	k, err := s.o.Store.GetKey(ctx, keyID)
	if err != nil {
		return "", nil, nil, false, notFound(err, "key")
	}
	v, err := s.o.Store.GetVendor(ctx, k.VendorID)
	if err != nil {
		return "", nil, nil, false, fmt.Errorf("vendor of key %s: %w", k.ID, err)
	}
	raw, err = s.o.Signer.Generate(s.o.Prefixes, v.Environment)
	if err != nil {
		return "", nil, nil, false, err
	}
	prefix, _ := s.o.Prefixes.For(v.Environment)
	now := s.now()
	revokeAt := now.Add(overlap).Truncate(time.Second)
	old, next, err = s.o.Store.RotateKey(ctx, keyID, func(old *store.Key) (*store.Key, error) {
		switch {
		case old.RevokedAt != nil:
			return nil, conflict("cannot rotate a revoked key: issue a new one (vendorctl key issue %s)", old.VendorID)
		case old.ReplacedBy != "":
			return nil, conflict("key %s was rotated already: its successor is %s", old.ID, old.ReplacedBy)
		case !now.Before(old.ExpiresAt):
			return nil, conflict("cannot rotate an expired key: issue a new one (vendorctl key issue %s)", old.VendorID)
		}
		n := &store.Key{ID: uuid.NewString(), VendorID: old.VendorID, Hash: apikey.Hash(raw), Prefix: prefix,
			Environment: v.Environment, CreatedAt: now, ExpiresAt: now.Add(s.o.KeyLifetime).Truncate(time.Second), RotatedFrom: old.ID}
		old.ReplacedBy, old.RevokeAt = n.ID, &revokeAt
		return n, nil
	})
	if err != nil {
		return "", nil, nil, false, notFound(err, "key")
	}
	s.o.Logger.Info("key rotated", "vendor_id", old.VendorID, "key_id", old.ID, "new_key_id", next.ID, "revoke_at", revokeAt)
	// Gateways that cached the old key drop it and look it up again,
	// learning its revoke_at: they refuse it then by themselves.
	published = s.publish(ctx, wire.Invalidation{KeyHash: old.Hash})
	if overlap == 0 {
		if old, published, err = s.RevokeKey(ctx, old.ID); err != nil {
			return "", nil, nil, false, fmt.Errorf("revoke key %s after its rotation: %w", keyID, err)
		}
	}
	return raw, old, next, published, nil
}

// ExpiringKeys lists every vendor's working keys (not revoked, not expired
// yet) that expire within d, soonest first.
func (s *Service) ExpiringKeys(ctx context.Context, d time.Duration) ([]*store.Key, error) {
	now := s.o.Now()
	return s.o.Store.ExpiringKeys(ctx, now, now.Add(d))
}

// KeyExpiryAlert is the span of the vendors_keys_expiring gauge: a live
// vendor whose every working key expires within it is about to be locked
// out.
const KeyExpiryAlert = 7 * 24 * time.Hour

// CountVendorsExpiring counts the approved live vendors that have a
// working key and none that lasts past KeyExpiryAlert.
func (s *Service) CountVendorsExpiring(ctx context.Context) (int, error) {
	return s.o.Store.CountVendorsExpiring(ctx, s.o.Now().Add(KeyExpiryAlert))
}

// dueBatch bounds the scheduled revocations RevokeDue makes in one run.
const dueBatch = 100

// RevokeDue revokes, through RevokeKey, every key whose rotation overlap
// has ended, and returns how many it revoked; revoked, when not nil, is
// told of each (the audit trail). Several replicas may run it at once: a
// revocation keeps its first time, and a second publish only drops an
// entry already dropped.
func (s *Service) RevokeDue(ctx context.Context, revoked func(context.Context, *store.Key)) (int, error) {
	ids, err := s.o.Store.DueRevocations(ctx, s.o.Now(), dueBatch)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		k, _, err := s.RevokeKey(ctx, id)
		if err != nil {
			return n, fmt.Errorf("revoke key %s at the end of its rotation overlap: %w", id, err)
		}
		if revoked != nil {
			revoked(ctx, k)
		}
		n++
	}
	return n, nil
}

// Resolve finds a key by the hex SHA-256 of the whole key, with its vendor.
// Revoked and expired keys resolve too: the gateway decides what to answer.
func (s *Service) Resolve(ctx context.Context, hash string) (*wire.KeyResolution, error) {
	if !isHexHash(hash) {
		return nil, apierr.New(apierr.NotFound, "no key has that hash")
	}
	k, err := s.o.Store.GetKeyByHash(ctx, hash)
	if err != nil {
		return nil, notFound(err, "key")
	}
	if k.RevokedAt == nil && k.RevokeAt != nil && !s.o.Now().Before(*k.RevokeAt) {
		// The rotation's overlap has ended and RevokeDue has not run yet.
		k.RevokedAt = k.RevokeAt
	}
	v, err := s.o.Store.GetVendor(ctx, k.VendorID)
	if err != nil {
		return nil, fmt.Errorf("vendor of key %s: %w", k.ID, err)
	}
	return &wire.KeyResolution{KeyID: k.ID, VendorID: v.ID, Environment: k.Environment,
		CreatedAt: k.CreatedAt, ExpiresAt: k.ExpiresAt, RevokedAt: k.RevokedAt, RevokeAt: k.RevokeAt,
		Vendor: wire.VendorInfo{Status: v.Status, CompanyName: v.CompanyName, EnabledServices: v.EnabledServices}}, nil
}

func isHexHash(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// SeedVendorID is the id of the seeded sandbox vendor, the same in every
// deployment (a name-based UUID of "vendorgate:seed:sandbox-demo-vendor"),
// which is harmless for a sandbox demo account.
const SeedVendorID = "63d2ffe7-46d2-5dd8-90c8-7a8144f8e543"

// Seed creates the approved "Sandbox Demo Vendor" with every service when
// no vendor exists yet. It reports whether it created one.
func (s *Service) Seed(ctx context.Context) (bool, error) {
	vs, err := s.o.Store.ListVendors(ctx)
	if err != nil {
		return false, err
	}
	if len(vs) > 0 {
		return false, nil
	}
	// A fixed id lets the primary key decide when several replicas seed an
	// empty database at the same moment: one insert wins, the others find
	// the vendor there and seed nothing.
	v := &store.Vendor{ID: SeedVendorID, CompanyName: SeedCompanyName, Environment: apikey.Sandbox,
		Status: wire.VendorApproved, EnabledServices: wire.Services(), CreatedAt: s.now()}
	if err := s.o.Store.CreateVendor(ctx, v); err != nil {
		if _, gerr := s.o.Store.GetVendor(ctx, SeedVendorID); gerr == nil {
			return false, nil
		}
		return false, err
	}
	s.o.Logger.Info("seeded sandbox vendor", "vendor_id", v.ID)
	return true, nil
}

// publish announces msg and reports whether it reached Redis.
func (s *Service) publish(ctx context.Context, msg wire.Invalidation) bool {
	if s.o.Publisher == nil {
		return false
	}
	if err := s.o.Publisher.Publish(ctx, msg); err != nil {
		// A gateway whose subscription broke too drops its cached keys when
		// it subscribes again, and within its key_cache.ttl at the latest;
		// one whose subscription held keeps the entry until it expires
		// (key_cache.pushed_ttl). The admin answer says it was not published.
		s.o.Logger.Warn("invalidation not published", "vendor_id", msg.VendorID, "error", err)
		return false
	}
	return true
}
