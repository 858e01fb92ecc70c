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
	// names are the policy names the store has seen, each numbered once
	// (ids): a bucket's counts are keyed by these numbers.
	names []string
	ids   map[string]int
	// A vendor's bucket holds only its counts that are not zero (most
	// vendors use a policy or two): a few words per vendor and minute
	// instead of every counter.
	minutes map[int64]map[string]sparse
	hours   map[int64]map[string]sparse
}

// sparse is a bucket's counts that are not zero, each its index (a policy
// name's id times slotsPerPolicy plus the counter: allowed, limited,
// shadow-limited, and in an hour the peak) in the top 16 bits and its
// count in the rest.
type sparse []uint64

const (
	sparseShift    = 48
	slotsPerPolicy = numCounters + 1 // the counters and an hour's peak
	cPeak          = numCounters
)

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

// values are the counts by policy name.
func (s sparse) values(names []string) Values {
	v := make(Values)
	for _, c := range s {
		i, n := int(c>>sparseShift), c&(1<<sparseShift-1)
		name := names[i/slotsPerPolicy]
		cs := v[name]
		switch i % slotsPerPolicy {
		case cAllowed:
			cs.Allowed = n
		case cLimited:
			cs.Limited = n
		case cShadow:
			cs.ShadowLimited = n
		case cPeak:
			cs.Peak = n
		}
		v[name] = cs
	}
	return v
}

// NewLocal returns an empty Local store; now is its clock (time.Now when
// nil), which decides what has expired.
func NewLocal(now func() time.Time) *Local {
	if now == nil {
		now = time.Now
	}
	return &Local{now: now, applied: make(map[string]int64), ids: make(map[string]int),
		minutes: make(map[int64]map[string]sparse), hours: make(map[int64]map[string]sparse)}
}

// id is name's number, made on first sight.
func (s *Local) id(name string) int {
	id, ok := s.ids[name]
	if !ok {
		id = len(s.names)
		s.names = append(s.names, name)
		s.ids[name] = id
	}
	return id
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
		var ids [MaxPolicies]int
		for p := range ids {
			ids[p] = -1
			if name := d.name(p); name != "" {
				ids[p] = s.id(name)
			}
		}
		for i := range d.Rows {
			row := &d.Rows[i]
			m, h := mb[row.Vendor], hb[row.Vendor]
			addRow(&m, &h, row, &ids)
			if len(m) > 0 {
				mb[row.Vendor], hb[row.Vendor] = m, h
			}
		}
	}
	s.expire()
	return nil
}

// addRow adds v to a minute's counts m and its hour's h under each
// policy's name id, and raises the hour's peak to the minute's demand.
func addRow(m, h *sparse, row *Row, ids *[MaxPolicies]int) {
	v := row.values()
	for p, id := range ids {
		if id < 0 {
			continue
		}
		base := id * slotsPerPolicy
		for c := 0; c < numCounters; c++ {
			n := v[p*numCounters+c]
			m.add(base+c, n)
			h.add(base+c, n)
		}
		if v[p*numCounters+cAllowed]+v[p*numCounters+cLimited] == 0 {
			continue // the minute's demand of p did not change
		}
		h.raise(base+cPeak, m.get(base+cAllowed)+m.get(base+cLimited))
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
	b := Buckets{Minutes: make(map[int64]map[string]Values, len(minutes)), Hours: make(map[int64]map[string]Values, len(hours))}
	for _, ms := range []struct {
		at  []int64
		src map[int64]map[string]sparse
		dst map[int64]map[string]Values
	}{{minutes, s.minutes, b.Minutes}, {hours, s.hours, b.Hours}} {
		for _, t := range ms.at {
			if src := ms.src[t]; len(src) > 0 {
				dst := make(map[string]Values, len(src))
				for v, vals := range src {
					dst[v] = vals.values(s.names)
				}
				ms.dst[t] = dst
			}
		}
	}
	return b, nil
}
