package usage

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"
)

// MaxWindow is the longest window the buckets answer for.
const MaxWindow = 24 * time.Hour

// ErrWindow is a window the buckets cannot answer for.
var ErrWindow = errors.New("window must be a whole number of minutes from 1m to 24h")

// Limit is one row of the policy table as configured now for a vendor
// (overrides applied): its name, quota and period; On is false when the
// row is off for the vendor.
type Limit struct {
	Name   string
	Quota  int
	Period time.Duration
	On     bool
}

// Limits tells the view the rows of the policy table for a vendor, in the
// table's order. Counts stored under a name no row has now (a policy
// removed or renamed) are shown under that name, without a quota.
type Limits func(vendor string) []Limit

// Quotas tells the view how much of quota policy (by name) vendor has used in
// the window holding now (the quota's own counter, which outlives the
// buckets' 25 hours); ok is false when it is not a quota of the vendor.
type Quotas func(vendor, policy string) (used QuotaUsed, ok bool, err error)

// QuotaUsed is one quota's use in its current window.
type QuotaUsed struct {
	Used        int       `json:"used"`
	Quota       int       `json:"quota"`
	WindowStart time.Time `json:"window_start"`
	WindowEnd   time.Time `json:"window_end"`
}

// Reader answers the usage view from a Store.
type Reader struct {
	Store  Store
	Limits Limits
	// Quotas reads the quotas' counters; optional.
	Quotas Quotas
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// TopRow is one (vendor, policy) of the top list.
type TopRow struct {
	VendorID      string `json:"vendor_id"`
	Limit         string `json:"limit"`
	Quota         int    `json:"quota"`
	PeriodSeconds int64  `json:"period_seconds"`
	Allowed       uint64 `json:"allowed"`
	Limited       uint64 `json:"limited"`
	ShadowLimited uint64 `json:"shadow_limited"`
	PeakPerMinute uint64 `json:"peak_per_minute"`
}

// Top is the answer of GET /usage.
type Top struct {
	Window string   `json:"window"`
	Rows   []TopRow `json:"vendors"`
}

// VendorUsage is the answer of GET /usage/{vendor_id}.
type VendorUsage struct {
	VendorID string        `json:"vendor_id"`
	Window   string        `json:"window"`
	Policies []PolicyUsage `json:"policies"`
}

// PolicyUsage is one policy's buckets of one vendor, oldest first.
type PolicyUsage struct {
	Limit         string `json:"limit"`
	Quota         int    `json:"quota"`
	PeriodSeconds int64  `json:"period_seconds"`
	// QuotaUsed is a quota's use of its current calendar window.
	QuotaUsed *QuotaUsed `json:"quota_used,omitempty"`
	Minutes   []Bucket   `json:"minutes"`
}

// Bucket is one minute's counts or, past the last hour, one hour's
// (Seconds 3600).
type Bucket struct {
	At            time.Time `json:"at"`
	Seconds       int       `json:"seconds"`
	Allowed       uint64    `json:"allowed"`
	Limited       uint64    `json:"limited"`
	ShadowLimited uint64    `json:"shadow_limited"`
}

// ParseWindow reads a window such as "15m", "1h" or "24h".
func ParseWindow(s string) (time.Duration, error) {
	if s == "" {
		return time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < time.Minute || d > MaxWindow || d%time.Minute != 0 {
		return 0, fmt.Errorf("%w (got %q)", ErrWindow, s)
	}
	return d, nil
}

// span is the buckets a window reads: up to an hour of minutes, the
// minutes of the last hour; past an hour, whole hours (the current one
// included), and for a vendor's view the last hour's minutes besides.
type span struct {
	minutes []int64 // Unix minutes, oldest first
	hours   []int64 // Unix hours, oldest first, all before minutes[0]'s hour when both
}

func spanOf(now time.Time, w time.Duration, withMinutes bool) span {
	nowMin := now.Unix() / 60
	var s span
	if w <= time.Hour {
		for m := nowMin - int64(w/time.Minute) + 1; m <= nowMin; m++ {
			s.minutes = append(s.minutes, m)
		}
		return s
	}
	nowHour := nowMin / 60
	first := (nowMin - int64(w/time.Minute) + 1) / 60
	last := nowHour
	if withMinutes {
		for m := nowMin - minuteBuckets + 1; m <= nowMin; m++ {
			s.minutes = append(s.minutes, m)
		}
		last = s.minutes[0]/60 - 1 // hours wholly before the minutes shown
	}
	for h := first; h <= last; h++ {
		s.hours = append(s.hours, h)
	}
	return s
}

// Top returns the n (vendor, policy) rows of window w with the most
// refusals, then the most shadow refusals, then the highest peak minute.
func (r *Reader) Top(w time.Duration, n int) (*Top, error) {
	sp := spanOf(r.now(), w, false)
	b, err := r.Store.Read(sp.minutes, sp.hours)
	if err != nil {
		return nil, err
	}
	type key struct {
		vendor, name string
	}
	rows := make(map[key]*TopRow)
	add := func(v, name string, c Counts, peak uint64) {
		k := key{v, name}
		tr := rows[k]
		if tr == nil {
			tr = &TopRow{VendorID: v, Limit: name}
			rows[k] = tr
		}
		tr.Allowed, tr.Limited, tr.ShadowLimited = tr.Allowed+c.Allowed, tr.Limited+c.Limited, tr.ShadowLimited+c.ShadowLimited
		tr.PeakPerMinute = max(tr.PeakPerMinute, peak)
	}
	for _, m := range sp.minutes {
		for v, vals := range b.Minutes[m] {
			for name, c := range vals {
				add(v, name, c, c.Allowed+c.Limited)
			}
		}
	}
	for _, h := range sp.hours {
		for v, vals := range b.Hours[h] {
			for name, c := range vals {
				add(v, name, c, c.Peak)
			}
		}
	}
	out := &Top{Window: formatWindow(w), Rows: make([]TopRow, 0, len(rows))}
	for _, tr := range rows {
		if l, ok := r.limit(tr.VendorID, tr.Limit); ok && l.On {
			tr.Quota, tr.PeriodSeconds = l.Quota, int64(l.Period/time.Second)
		}
		out.Rows = append(out.Rows, *tr)
	}
	sort.Slice(out.Rows, func(i, j int) bool {
		a, b := out.Rows[i], out.Rows[j]
		switch {
		case a.Limited != b.Limited:
			return a.Limited > b.Limited
		case a.ShadowLimited != b.ShadowLimited:
			return a.ShadowLimited > b.ShadowLimited
		case a.PeakPerMinute != b.PeakPerMinute:
			return a.PeakPerMinute > b.PeakPerMinute
		case a.VendorID != b.VendorID:
			return a.VendorID < b.VendorID
		}
		return a.Limit < b.Limit
	})
	if n > 0 && len(out.Rows) > n {
		out.Rows = out.Rows[:n]
	}
	return out, nil
}

// Vendor returns one vendor's buckets of window w per policy it used or
// has a limit for; ok is false when the vendor has no usage in the window.
func (r *Reader) Vendor(vendor string, w time.Duration) (*VendorUsage, bool, error) {
	sp := spanOf(r.now(), w, true)
	b, err := r.Store.Read(sp.minutes, sp.hours)
	if err != nil {
		return nil, false, err
	}
	out := &VendorUsage{VendorID: vendor, Window: formatWindow(w)}
	seen := false
	// The table's rows in order, then names stored that no row has now.
	table := r.limits(vendor)
	inTable := make(map[string]bool, len(table))
	for _, l := range table {
		inTable[l.Name] = true
	}
	var gone []string
	for _, bs := range []map[int64]map[string]Values{b.Minutes, b.Hours} {
		for _, byVendor := range bs {
			for name := range byVendor[vendor] {
				if !inTable[name] && !slices.Contains(gone, name) {
					gone = append(gone, name)
				}
			}
		}
	}
	slices.Sort(gone)
	for _, name := range gone {
		table = append(table, Limit{Name: name})
	}
	for _, l := range table {
		pu := PolicyUsage{Limit: l.Name}
		if l.On {
			pu.Quota, pu.PeriodSeconds = l.Quota, int64(l.Period/time.Second)
		}
		used := false
		for _, h := range sp.hours {
			c := b.Hours[h][vendor][l.Name]
			used = used || !c.zero()
			pu.Minutes = append(pu.Minutes, Bucket{At: time.Unix(h*3600, 0).UTC(), Seconds: 3600, Allowed: c.Allowed, Limited: c.Limited, ShadowLimited: c.ShadowLimited})
		}
		for _, m := range sp.minutes {
			c := b.Minutes[m][vendor][l.Name]
			used = used || !c.zero()
			pu.Minutes = append(pu.Minutes, Bucket{At: time.Unix(m*60, 0).UTC(), Seconds: 60, Allowed: c.Allowed, Limited: c.Limited, ShadowLimited: c.ShadowLimited})
		}
		if r.Quotas != nil {
			q, ok, err := r.Quotas(vendor, l.Name)
			if err != nil {
				return nil, false, err
			}
			if ok {
				pu.QuotaUsed = &q
				used = used || q.Used > 0
			}
		}
		seen = seen || used
		if used || l.On {
			out.Policies = append(out.Policies, pu)
		}
	}
	return out, seen, nil
}

func (r *Reader) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Reader) limits(v string) []Limit {
	if r.Limits == nil {
		return nil
	}
	return r.Limits(v)
}

// limit is the row named name of v's table now.
func (r *Reader) limit(v, name string) (Limit, bool) {
	for _, l := range r.limits(v) {
		if l.Name == name {
			return l, true
		}
	}
	return Limit{}, false
}

func formatWindow(w time.Duration) string {
	if w%time.Hour == 0 {
		return fmt.Sprintf("%dh", w/time.Hour)
	}
	return fmt.Sprintf("%dm", w/time.Minute)
}
