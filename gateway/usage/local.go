package usage

import (
	"sync"
	"time"
)

// Local is a Store in process, for a gateway without Redis: the same
// buckets, kept for the same time.
type Local struct {
	now func() time.Time

	mu      sync.Mutex
	applied map[string]int64 // delta id -> its minute, for once-only
	// A vendor's bucket holds only its counts that are not zero (most
	// vendors use a policy or two of MaxPolicies): a few words per vendor
	// and minute instead of every counter.
	minutes map[int64]map[string]sparse
	hours   map[int64]map[string]sparse
}

// sparse is a bucket's counts that are not zero, each its index in the
// values (numValues and, in an hour, MaxPolicies peaks after them) in the
// top 8 bits and its count in the rest.
type sparse []uint64

const sparseShift = 56

// add adds n to the count at index i.
func (s *sparse) add(i int, n uint64) {
	if n == 0 {
		return
	}
	for j, c := range *s {
		if int(c>>sparseShift) == i {
			(*s)[j] = c + n
			return
		}
	}
	*s = append(*s, uint64(i)<<sparseShift|n)
}

// get is the count at index i.
func (s sparse) get(i int) uint64 {
	for _, c := range s {
		if int(c>>sparseShift) == i {
			return c & (1<<sparseShift - 1)
		}
	}
	return 0
}

// raise sets the count at index i to n if n is larger.
func (s *sparse) raise(i int, n uint64) {
	if old := s.get(i); n > old {
		s.add(i, n-old)
	}
}

// values copies the counts out, peaks (indexes from numValues) into peak
// when not nil.
func (s sparse) values(peak *[MaxPolicies]uint64) Values {
	var v Values
	for _, c := range s {
		i, n := int(c>>sparseShift), c&(1<<sparseShift-1)
		switch {
		case i < numValues:
			v[i] = n
		case peak != nil:
			peak[i-numValues] = n
		}
	}
	return v
}

// NewLocal returns an empty Local store; now is its clock (time.Now when
// nil), which decides what has expired.
func NewLocal(now func() time.Time) *Local {
	if now == nil {
		now = time.Now
	}
	return &Local{now: now, applied: make(map[string]int64),
		minutes: make(map[int64]map[string]sparse), hours: make(map[int64]map[string]sparse)}
}

// Apply adds each delta once.
func (s *Local) Apply(ds []*Delta) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range ds {
		if _, ok := s.applied[d.ID]; ok {
			continue
		}
		s.applied[d.ID] = d.Minute
		mb := s.minutes[d.Minute]
		if mb == nil {
			mb = make(map[string]sparse)
			s.minutes[d.Minute] = mb
		}
		hour := d.Minute / 60
		hb := s.hours[hour]
		if hb == nil {
			hb = make(map[string]sparse)
			s.hours[hour] = hb
		}
		for i := range d.Rows {
			row := &d.Rows[i]
			m, h := mb[row.Vendor], hb[row.Vendor]
			addRow(&m, &h, &row.Values)
			mb[row.Vendor], hb[row.Vendor] = m, h
		}
	}
	s.expire()
	return nil
}

// addRow adds v to a minute's counts m and its hour's h, and raises the
// hour's per-policy peak to the minute's demand.
func addRow(m, h *sparse, v *[numValues]uint64) {
	for i, n := range v {
		m.add(i, n)
		h.add(i, n)
	}
	for p := 0; p < MaxPolicies; p++ {
		if v[p*numCounters+cAllowed]+v[p*numCounters+cLimited] == 0 {
			continue // the minute's demand of p did not change
		}
		h.raise(numValues+p, m.get(p*numCounters+cAllowed)+m.get(p*numCounters+cLimited))
	}
}

// expire drops what Redis would have expired.
func (s *Local) expire() {
	nowMin := s.now().Unix() / 60
	for m := range s.minutes {
		if m < nowMin-minuteBuckets {
			delete(s.minutes, m)
		}
	}
	for h := range s.hours {
		if h < nowMin/60-hourBuckets {
			delete(s.hours, h)
		}
	}
	for id, m := range s.applied {
		if m < nowMin-2*minuteBuckets {
			delete(s.applied, id)
		}
	}
}

// Read copies the buckets asked for.
func (s *Local) Read(minutes, hours []int64) (Buckets, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := Buckets{Minutes: make(map[int64]map[string]Values, len(minutes)), Hours: make(map[int64]map[string]HourValues, len(hours))}
	for _, m := range minutes {
		if src := s.minutes[m]; len(src) > 0 {
			dst := make(map[string]Values, len(src))
			for v, vals := range src {
				dst[v] = vals.values(nil)
			}
			b.Minutes[m] = dst
		}
	}
	for _, h := range hours {
		if src := s.hours[h]; len(src) > 0 {
			dst := make(map[string]HourValues, len(src))
			for v, vals := range src {
				var hv HourValues
				hv.Values = vals.values(&hv.Peak)
				dst[v] = hv
			}
			b.Hours[h] = dst
		}
	}
	return b, nil
}
