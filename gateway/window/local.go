package window

import (
	"sync"
	"time"

	"vendorgate/gateway/policy"
)

// Local decides windowed checks in process, for a single gateway: the
// same arithmetic as the script, on the gateway's clock.
type Local struct {
	now func() time.Time
	mu  sync.Mutex
	// quotas are the counters by window key; sliding the admission times
	// of each sliding bucket, oldest first.
	quotas  map[string]quotaCount
	sliding map[string]slidingTimes
	swept   time.Time // the last sweep
}

type slidingTimes struct {
	times []time.Time // oldest first
	w     time.Duration
}

type quotaCount struct {
	used int
	end  time.Time
}

// NewLocal returns an in-process window limiter on clock now (time.Now
// when nil).
func NewLocal(now func() time.Time) *Local {
	if now == nil {
		now = time.Now
	}
	return &Local{now: now, quotas: make(map[string]quotaCount), sliding: make(map[string]slidingTimes)}
}

// Charge decides and charges cs.
func (l *Local) Charge(cs policy.Checks) (Decision, error) {
	var d Decision
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(now)
	ok := true
	for i := 0; i < cs.Count; i++ {
		c := &cs.List[i]
		r := &d.Results[i]
		if c.Rate.Kind == policy.Quota {
			start, end := c.Rate.Calendar.Window(now)
			r.start, r.Window = start.Unix(), end.Sub(start)
			r.Used = l.quotas[quotaKey(c.Key, r.start)].used
			r.ResetAfter = end.Sub(now)
			r.RetryAfter = r.ResetAfter
		} else {
			times := l.live(c.Key, now, c.Rate.Period)
			r.Used, r.Window = len(times), c.Rate.Period
			if r.Used >= c.Rate.Limit {
				r.RetryAfter = times[r.Used-c.Rate.Limit].Add(c.Rate.Period).Sub(now)
			}
			if r.Used > 0 {
				r.ResetAfter = times[r.Used-1].Add(c.Rate.Period).Sub(now)
			}
		}
		r.Allowed = r.Used < c.Rate.Limit
		ok = ok && (r.Allowed || c.Rate.Shadow)
	}
	for i := 0; i < cs.Count; i++ {
		c := &cs.List[i]
		r := &d.Results[i]
		if ok && r.Allowed {
			r.charged = true
			r.Used++
			if c.Rate.Kind == policy.Quota {
				k := quotaKey(c.Key, r.start)
				l.quotas[k] = quotaCount{used: r.Used, end: time.Unix(r.start, 0).Add(r.Window)}
			} else {
				st := l.sliding[c.Key]
				l.sliding[c.Key] = slidingTimes{times: append(st.times, now), w: c.Rate.Period}
				r.ResetAfter = c.Rate.Period
				r.start = now.UnixNano() // what Refund removes
			}
		}
	}
	d.decide(&cs)
	return d, nil
}

// live drops a sliding bucket's times at or before now-w and returns the
// rest.
func (l *Local) live(key string, now time.Time, w time.Duration) []time.Time {
	times := l.sliding[key].times
	n := 0
	for n < len(times) && !times[n].After(now.Add(-w)) {
		n++
	}
	times = times[n:]
	if len(times) == 0 {
		delete(l.sliding, key)
		return nil
	}
	l.sliding[key] = slidingTimes{times: times, w: w}
	return times
}

// sweep forgets, once a minute, the quota windows that have ended (an
// hour after, as in Redis) and the sliding buckets whose last request
// has left its window, so that the maps hold live buckets only.
func (l *Local) sweep(now time.Time) {
	if now.Sub(l.swept) < time.Minute {
		return
	}
	l.swept = now
	for k, q := range l.quotas {
		if now.After(q.end.Add(time.Hour)) {
			delete(l.quotas, k)
		}
	}
	for k, st := range l.sliding {
		if n := len(st.times); n == 0 || !st.times[n-1].After(now.Add(-st.w)) {
			delete(l.sliding, k)
		}
	}
}

// Refund takes back d's charges.
func (l *Local) Refund(cs policy.Checks, d Decision) Decision {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := 0; i < d.Count; i++ {
		r := &d.Results[i]
		if !r.charged {
			continue
		}
		c := &cs.List[i]
		if c.Rate.Kind == policy.Quota {
			k := quotaKey(c.Key, r.start)
			if q, ok := l.quotas[k]; ok && q.used > 0 {
				q.used--
				l.quotas[k] = q
			}
		} else {
			// Remove one entry of the request's time (entries of equal
			// times are alike); a later one would leave the window sooner.
			st := l.sliding[c.Key]
			for j := len(st.times) - 1; j >= 0; j-- {
				if st.times[j].UnixNano() == r.start {
					st.times = append(st.times[:j], st.times[j+1:]...)
					l.sliding[c.Key] = st
					break
				}
			}
		}
		r.refunded(c.Rate.Limit)
	}
	return d
}

// Used is a quota bucket's counter for the window holding now.
func (l *Local) Used(key string, r policy.Rate) (int, time.Time, time.Time, error) {
	start, end := r.Calendar.Window(l.now())
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.quotas[quotaKey(key, start.Unix())].used, start, end, nil
}
