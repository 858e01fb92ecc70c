package accesslog

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"vendorgate/shared/apierr"
)

// Refusals bounds the access log's lines of answers with an error code
// (access_log.refusals_per_second): up to perSecond of each code are
// written in full each second, so that a refusal a vendor quotes by its
// X-Request-Id is found in normal running; past that, the answers of the
// code are counted by code, status and route, and written as one summary
// line each access_log.summary_interval (flush). An outage answering
// thousands of requests a second 503 then writes a few hundred lines a
// second, not one per request. It runs only for answers with an error code:
// a clean request never takes its lock.
type Refusals struct {
	perSecond int // 0: every answer is written in full
	// msg and level are the summary line's.
	msg   string
	level slog.Level

	mu      sync.Mutex
	second  int64               // the Unix second logged counts
	logged  map[apierr.Code]int // lines written in full this second, by code
	pending map[refusalKey]*refusalSum
	flushed time.Time // the last flush
}

type refusalKey struct {
	code   apierr.Code
	route  string
	status int
}

// refusalSum is the answers of one key not written in full since the last
// flush.
type refusalSum struct {
	count       uint64
	first, last time.Time
}

// NewRefusals bounds the access log's lines of answers with an error code
// to perSecond of each code a second (0: no bound).
func NewRefusals(perSecond int) *Refusals {
	return NewSummary(perSecond, "requests refused", slog.LevelInfo)
}

// NewSummary is a Refusals whose summary lines are msg at level: the same
// bound for other lines anyone can provoke (the plain listener's exposed
// keys).
func NewSummary(perSecond int, msg string, level slog.Level) *Refusals {
	return &Refusals{perSecond: perSecond, msg: msg, level: level, logged: make(map[apierr.Code]int),
		pending: make(map[refusalKey]*refusalSum), flushed: time.Now()}
}

// Admit reports whether the answer of code, status and route that ended at
// at is written in full; when not, it is counted for the summary.
func (r *Refusals) Admit(code apierr.Code, route string, status int, at time.Time) bool {
	if r.perSecond == 0 {
		return true
	}
	sec := at.Unix()
	r.mu.Lock()
	defer r.mu.Unlock()
	if sec > r.second { // an answer ending in an earlier second counts in the current one
		r.second = sec
		clear(r.logged)
	}
	if r.logged[code] < r.perSecond {
		r.logged[code]++
		return true
	}
	k := refusalKey{code: code, route: route, status: status}
	s := r.pending[k]
	if s == nil {
		s = &refusalSum{first: at, last: at}
		r.pending[k] = s
	}
	s.count++
	if at.Before(s.first) {
		s.first = at
	}
	if at.After(s.last) {
		s.last = at
	}
	return false
}

// Flush writes a summary line for each key counted since the last flush:
// its msg ("requests refused") with the error code, status, route, the count of
// answers not written in full, and the first and last of them.
func (r *Refusals) Flush(log *slog.Logger) {
	r.mu.Lock()
	pending := r.pending
	r.pending = make(map[refusalKey]*refusalSum)
	r.flushed = time.Now()
	r.mu.Unlock()
	if len(pending) == 0 {
		return
	}
	keys := make([]refusalKey, 0, len(pending))
	for k := range pending {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b refusalKey) int {
		return cmp.Or(cmp.Compare(a.code, b.code), cmp.Compare(a.route, b.route), cmp.Compare(a.status, b.status))
	})
	for _, k := range keys {
		s := pending[k]
		log.Log(context.Background(), r.level, r.msg, "error", string(k.code), "status", k.status, "route", k.route, "count", s.count,
			"first", s.first.UTC().Format(time.RFC3339Nano), "last", s.last.UTC().Format(time.RFC3339Nano))
	}
}

// Due reports whether interval has passed since the last flush.
func (r *Refusals) Due(interval time.Duration) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return time.Since(r.flushed) >= interval
}
