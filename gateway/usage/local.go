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
	minutes map[int64]map[string]*Values
	hours   map[int64]map[string]*HourValues
}

// NewLocal returns an empty Local store; now is its clock (time.Now when
// nil), which decides what has expired.
func NewLocal(now func() time.Time) *Local {
	if now == nil {
		now = time.Now
	}
	return &Local{now: now, applied: make(map[string]int64),
		minutes: make(map[int64]map[string]*Values), hours: make(map[int64]map[string]*HourValues)}
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
			mb = make(map[string]*Values)
			s.minutes[d.Minute] = mb
		}
		hour := d.Minute / 60
		hb := s.hours[hour]
		if hb == nil {
			hb = make(map[string]*HourValues)
			s.hours[hour] = hb
		}
		for i := range d.Rows {
			row := &d.Rows[i]
			m := mb[row.Vendor]
			if m == nil {
				m = new(Values)
				mb[row.Vendor] = m
			}
			h := hb[row.Vendor]
			if h == nil {
				h = new(HourValues)
				hb[row.Vendor] = h
			}
			addRow(m, h, &row.Values)
		}
	}
	s.expire()
	return nil
}

// addRow adds v to a minute's values m and its hour's h, and raises the
// hour's per-policy peak to the minute's demand.
func addRow(m *Values, h *HourValues, v *[numValues]uint64) {
	for i, n := range v {
		m[i] += n
		h.Values[i] += n
	}
	for p := Policy(0); p < MaxPolicies; p++ {
		a, l, _ := m.Get(p)
		if a+l > h.Peak[p] {
			h.Peak[p] = a + l
		}
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
				dst[v] = *vals
			}
			b.Minutes[m] = dst
		}
	}
	for _, h := range hours {
		if src := s.hours[h]; len(src) > 0 {
			dst := make(map[string]HourValues, len(src))
			for v, vals := range src {
				dst[v] = *vals
			}
			b.Hours[h] = dst
		}
	}
	return b, nil
}
