package usage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"vendorgate/shared/wire"
)

// BackendOptions configures a Backend store.
type BackendOptions struct {
	// Post sends one flush part (a wire.UsageFlush as JSON) to the
	// backend's wire.UsageFlushPath and returns nil once the backend took
	// it (applied now or before). Required.
	Post func(ctx context.Context, body []byte) error
	// Timeout bounds one Apply. Required.
	Timeout time.Duration
}

// Backend is the Store that feeds the backend's daily totals, the month
// report's requests and refusals by limit: each Delta is posted as one
// wire.UsageFlush per wire.MaxUsageFlushRows rows, under the Delta's ID
// (and the part's number), which the backend applies once, so that a
// retried flush counts once. It keeps nothing to read: Read fails.
type Backend struct {
	o BackendOptions
}

// NewBackend returns a Backend store.
func NewBackend(o BackendOptions) (*Backend, error) {
	if o.Post == nil {
		return nil, errors.New("usage: backend store needs a Post")
	}
	if o.Timeout <= 0 {
		return nil, fmt.Errorf("usage: backend store timeout %s is not positive", o.Timeout)
	}
	return &Backend{o: o}, nil
}

// Apply posts each delta; a delta whose parts were not all taken is
// reported failed (its taken parts are skipped by the backend on retry).
func (b *Backend) Apply(ds []*Delta) []error {
	ctx, cancel := context.WithTimeout(context.Background(), b.o.Timeout)
	defer cancel()
	var errs []error
	for i, d := range ds {
		if err := b.apply(ctx, d); err != nil {
			if errs == nil {
				errs = make([]error, len(ds))
			}
			errs[i] = fmt.Errorf("usage flush %s to the backend: %w", d.ID, err)
		}
	}
	return errs
}

func (b *Backend) apply(ctx context.Context, d *Delta) error {
	return eachPart(d, func(f *wire.UsageFlush) error {
		body, err := json.Marshal(f)
		if err != nil {
			return err
		}
		return b.o.Post(ctx, body)
	})
}

// FlushParts is d as the backend takes it: its rows by vendor and policy
// name (a policy with no name, or nothing counted, is left out), in parts
// of at most wire.MaxUsageFlushRows rows. A delta that fits one part keeps
// its ID; parts of a larger one are named ID/1, ID/2, ...: the same for a
// retry of the same delta, so the backend applies each once.
func FlushParts(d *Delta) []wire.UsageFlush {
	var out []wire.UsageFlush
	_ = eachPart(d, func(f *wire.UsageFlush) error {
		out = append(out, wire.UsageFlush{ID: f.ID, Minute: f.Minute, Rows: slices.Clone(f.Rows)})
		return nil
	})
	return out
}

// eachPart hands FlushParts' parts to send one at a time, in one buffer of
// a part's rows (send must not keep f), and stops at send's first error: a
// flush of 100,000 vendors holds 500 rows while it is posted, not 100,000
// (6.4 MB). A full part goes out when the next row comes, so that a delta
// that fits one part keeps its ID without a walk to count its rows first.
func eachPart(d *Delta, send func(f *wire.UsageFlush) error) error {
	f := wire.UsageFlush{ID: d.ID, Minute: d.Minute}
	part := 0
	var err error
	d.eachRow(func(r wire.UsageFlushRow) {
		if err != nil {
			return
		}
		if len(f.Rows) == wire.MaxUsageFlushRows { // one more: the delta goes in parts
			part++
			f.ID = d.ID + "/" + strconv.Itoa(part)
			if err = send(&f); err != nil {
				return
			}
			f.Rows = f.Rows[:0]
		}
		f.Rows = append(f.Rows, r)
	})
	if err != nil {
		return err
	}
	if part > 0 {
		f.ID = d.ID + "/" + strconv.Itoa(part+1)
	}
	return send(&f)
}

// eachRow calls fn with each of d's rows as the backend takes them, by
// vendor and policy name.
func (d *Delta) eachRow(fn func(wire.UsageFlushRow)) {
	for i := range d.Rows {
		r := &d.Rows[i]
		for p := range MaxPolicies {
			name := d.name(p)
			base := p * numCounters
			allowed, limited, shadow := r.Value(base+cAllowed), r.Value(base+cLimited), r.Value(base+cShadow)
			if name == "" || (allowed == 0 && limited == 0 && shadow == 0) {
				continue
			}
			fn(wire.UsageFlushRow{VendorID: r.Vendor, Policy: name, Allowed: allowed, Limited: limited, ShadowLimited: shadow})
		}
	}
}

// Read fails: the backend's totals are read with the month report.
func (b *Backend) Read(minutes, hours []int64) (Buckets, error) {
	return Buckets{}, errors.New("usage: the backend store keeps daily totals for the month report, not buckets")
}
