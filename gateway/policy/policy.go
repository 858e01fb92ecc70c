// Package policy is the limit policy table: its rows (a name, a scope,
// a class of routes, a rate and burst per period, a shadow flag and twin),
// each key's bucket names, and the checks a request to a route makes. It
// knows nothing of how a check is decided (package limit does, in process
// or in Redis): auth keeps bucket names by it, usage counts by it, and the
// docs page reads it.
package policy

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// MaxChecks is how many limits one request can be subject to: the policies
// of its route's classes, and a shadow twin of each (NewTable refuses a
// table past it). The checks travel by value in an array of this size.
const MaxChecks = 16

// Rate is one limit: Limit tokens per Period, with bursts up to Burst
// (Limit when zero); a request costs Cost tokens (one when zero). Shadow
// limits are counted and reported but never refuse. Refund gives a
// request's tokens back when the gateway failed it for the backend (see
// package limit's Refund). Name is the policy name in the RateLimit
// headers.
type Rate struct {
	Name   string
	Limit  int
	Burst  int
	Period time.Duration
	Shadow bool
	// Kind is how the limit is decided: GCRA (package limit) unless set;
	// a Quota or a Sliding window is decided by package window, a
	// Concurrency cap by package concurrency. Calendar
	// is a quota's window (Period is then its nominal length: the
	// calendar's days, 31 for a month).
	Kind     Kind
	Calendar Calendar
	// Refund gives a request's tokens back when it failed for the
	// backend (limit.Refund); Cost is the tokens one request takes
	// (Tokens: at least 1).
	Refund bool
	Cost   int32
	// Lease (a Quota only): the quota's counter is leased in slices
	// (package window), not asked of Redis for each request.
	Lease bool
}

// Kind is how a policy decides.
type Kind uint8

// The kinds.
const (
	// GCRA: a token bucket of Burst refilled at Limit per Period
	// (redis_rate's GCRA, package limit); the default.
	GCRA Kind = iota
	// Quota: at most Limit in each calendar window (Calendar), one counter
	// per window (package window).
	Quota
	// Sliding: at most Limit in any Period, however the requests fall
	// (package window).
	Sliding
	// Concurrency: at most Limit requests in flight at once (Period is
	// not set): a slot taken at admission and given back when the answer
	// is done (package concurrency). Its checks are the plan's Slots, not
	// its Checks, and it is not in the RateLimit headers.
	Concurrency
)

// String is the kind's name in the configuration and on the docs page.
func (k Kind) String() string {
	switch k {
	case Quota:
		return "quota"
	case Sliding:
		return "window"
	case Concurrency:
		return "concurrency"
	}
	return "gcra"
}

// Calendar is a quota's window in UTC: the month when Month, else Days
// days counted from 1970-01-01 (1: each UTC day).
type Calendar struct {
	Days  uint16
	Month bool
}

// Window is when the window holding now begins and ends.
func (c Calendar) Window(now time.Time) (start, end time.Time) {
	now = now.UTC()
	if c.Month {
		start = time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
		return start, start.AddDate(0, 1, 0)
	}
	span := int64(max(c.Days, 1)) * 86400
	s := now.Unix() / span * span
	return time.Unix(s, 0).UTC(), time.Unix(s+span, 0).UTC()
}

// Tokens is what one request costs: Cost, at least 1.
func (r Rate) Tokens() int {
	if r.Cost > 1 {
		return int(r.Cost)
	}
	return 1
}

// EffectiveBurst is the effective burst: Limit when Burst is not set.
func (r Rate) EffectiveBurst() int {
	if r.Burst > 0 {
		return r.Burst
	}
	return r.Limit
}

// Quota is the policy's quota in the RateLimit headers: the burst.
func (r Rate) Quota() int { return r.EffectiveBurst() }

// Valid reports whether r can ever allow a request; redis_rate denies every
// call with a zero burst and errors on a zero limit.
func (r Rate) Valid() bool { return r.Limit > 0 && r.Period > 0 }

// Check is one limit applied to one bucket. Key names the bucket; keys of
// one request share a Redis Cluster hash tag ("vg:{v:<vendor>}:...").
type Check struct {
	Key  string
	Rate Rate
	// Policy is the index of the policy in its table (usage counts by it);
	// Twin marks the check of the policy's shadow twin.
	Policy int
	Twin   bool
}

// Checks are the limits of one request, passed by value so that a call
// through an interface does not allocate.
type Checks struct {
	Count int              // how many of List are set
	List  [MaxChecks]Check // the first Count are the checks
}

// Add appends c; it ignores checks past MaxChecks and rates that are not set.
func (cs *Checks) Add(c Check) {
	if cs.Count < MaxChecks && c.Rate.Valid() {
		cs.List[cs.Count] = c
		cs.Count++
	}
}

// Enforces reports whether any check may refuse the request: one that is
// not a shadow limit.
func (cs *Checks) Enforces() bool {
	for i := 0; i < cs.Count; i++ {
		if !cs.List[i].Rate.Shadow {
			return true
		}
	}
	return false
}

// A limit policy is one row of the policy table: its name (the
// RateLimit-Policy name, the metrics' and the usage view's label), its
// scope (whose requests share its bucket), the class of routes it counts,
// its rate and burst per period, its shadow flag and its shadow twin. The
// configuration holds the rows (config.Limits.Rows); the gateway compiles
// them into a Table once per load and per vendor override. A request's
// checks, its RateLimit headers, its usage counts (by policy index) and
// the docs page all read the same rows.
//
// Adding a policy is one row (limits.policies in the configuration) plus,
// for a new class, the routes that count it (the gateway's route table).

// MaxPolicies is the policy table's capacity: each key's bucket names and
// each vendor's usage counters are arrays of this size, so that the
// request path does not allocate.
const MaxPolicies = 16

// Scope says whose requests share a policy's bucket.
type Scope uint8

// The scopes.
const (
	// PerVendor: every key of the vendor, on every gateway replica.
	PerVendor Scope = iota
	// PerKey: one key.
	PerKey
)

// Policy is one row of the policy table as the gateway enforces it. Rate's
// Name is the policy's name and Shadow its shadow flag; Twin is its shadow
// twin (a Rate with Limit 0 when none), evaluated on a bucket of its own
// and never enforced.
type Policy struct {
	Rate
	Scope Scope
	// Class is the class of routes it counts ("reads", "orders", ...).
	Class string
	Twin  Rate
}

// On reports whether the row counts anything: a positive rate (and, for a
// GCRA row, a period).
func (p Policy) On() bool {
	if p.Kind == Concurrency {
		return p.Limit > 0
	}
	return p.Valid()
}

// Layout is what a table's bucket names depend on: each row's scope and
// name, by index. The tables of one load share one Layout (an override
// changes rates, not rows); a reload that keeps the rows keeps it, so the
// bucket names each key holds stay valid.
type Layout struct {
	rows []layoutRow
}

type layoutRow struct {
	scope  Scope
	suffix string // the bucket's name after the vendor's tag (and key id)
	// unnamed: no table of the load checks the row, so keys hold no
	// bucket name for it (LayoutOf).
	unnamed bool
}

// NewLayout returns the layout of rows; prev when it is the same, so that
// the bucket names keys hold stay valid across a reload.
func NewLayout(rows []Policy, prev *Layout) *Layout {
	l := &Layout{rows: make([]layoutRow, len(rows))}
	for i, p := range rows {
		suffix := p.Name
		if p.Scope == PerKey {
			// A per-key bucket sits under the key's id already:
			// key-reads counts in "k:<key_id>:reads".
			suffix = strings.TrimPrefix(suffix, "key-")
		}
		if p.Kind == Concurrency {
			// A sorted set of slots: never a GCRA bucket's name, should a
			// row change its kind and keep its name.
			suffix += ":slots"
		}
		l.rows[i] = layoutRow{scope: p.Scope, suffix: suffix}
	}
	if prev != nil && equalRows(prev.rows, l.rows) {
		return prev
	}
	return l
}

// LayoutOf is the layout of tables compiled from the same rows (a load's
// defaults and each override; at least one): only the rows some table
// checks get bucket names, so that a key holds none for a policy off
// everywhere (the per-key rows, by default). prev is returned when it is
// the same.
func LayoutOf(tables []*Table, prev *Layout) *Layout {
	rows := tables[0].Policies
	l := NewLayout(rows, nil)
	for i := range l.rows {
		checked := false
		for _, t := range tables {
			checked = checked || t.Policies[i].On()
		}
		l.rows[i].unnamed = !checked
	}
	if prev != nil && equalRows(prev.rows, l.rows) {
		return prev
	}
	return l
}

func equalRows(a, b []layoutRow) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Bucket is a policy's bucket names for one key: its own and its twin's.
type Bucket struct {
	Key, Twin string
}

// Buckets are one key's bucket names under Layout, by policy index (up to
// the last row named; an unnamed row's names are empty). They are kept for
// every cached key: one string holding the names and, after them, where
// each row's name is in it (4 bytes a row up to the last named; 32 bytes
// and the string in all), not a Bucket of two string headers per row.
type Buckets struct {
	Layout *Layout
	// all is the names, then from names on each row's span: its name's
	// start and end (uint16, little-endian; uint32 when wide; its twin's
	// name runs on to ":twin"), both zero for an unnamed row.
	all   string
	names uint32
	rows  uint8 // spans in all: the rows up to the last named
	// wide: the names are too long for 16-bit spans (a vendor or key id
	// of thousands of bytes): 32-bit ones, 8 bytes a row.
	wide bool
}

const twinSuffix = ":twin"

// Name is row i's bucket names.
func (b *Buckets) Name(i int) Bucket {
	if i >= int(b.rows) {
		return Bucket{}
	}
	var start, end int
	if !b.wide {
		o := int(b.names) + 4*i
		start = int(b.all[o]) | int(b.all[o+1])<<8
		end = int(b.all[o+2]) | int(b.all[o+3])<<8
	} else {
		o := int(b.names) + 8*i
		start = int(b.all[o]) | int(b.all[o+1])<<8 | int(b.all[o+2])<<16 | int(b.all[o+3])<<24
		end = int(b.all[o+4]) | int(b.all[o+5])<<8 | int(b.all[o+6])<<16 | int(b.all[o+7])<<24
	}
	if end == 0 {
		return Bucket{}
	}
	return Bucket{Key: b.all[start:end], Twin: b.all[start : end+len(twinSuffix)]}
}

// Len is the number of rows up to the last named one.
func (b *Buckets) Len() int {
	for i := MaxPolicies; i > 0; i-- {
		if b.Name(i-1).Key != "" {
			return i
		}
	}
	return 0
}

// Buckets builds the bucket names of a key: every bucket of a vendor shares
// the hash tag {v:<vendor_id>}, so that a Redis Cluster keeps one request's
// buckets in one slot. The names are substrings of one string ("name:twin"
// for each row, the twin's name ending where the row's is followed by
// ":twin"): one allocation per key, not two per row.
func (l *Layout) Buckets(vendorID, keyID string) *Buckets {
	tag := "vg:{v:" + vendorID + "}:"
	n, rows := 0, 0
	for i, r := range l.rows {
		if r.unnamed {
			continue
		}
		rows = i + 1
		n += len(tag) + len(r.suffix) + len(twinSuffix)
		if r.scope == PerKey {
			n += len("k:") + len(keyID) + len(":")
		}
	}
	wide := n > math.MaxUint16
	span := 4
	if wide {
		span = 8
	}
	var sb strings.Builder
	sb.Grow(n + span*rows)
	var ends [MaxPolicies][2]int
	for i, r := range l.rows[:rows] {
		if r.unnamed {
			continue
		}
		start := sb.Len()
		sb.WriteString(tag)
		if r.scope == PerKey {
			sb.WriteString("k:")
			sb.WriteString(keyID)
			sb.WriteString(":")
		}
		sb.WriteString(r.suffix)
		ends[i] = [2]int{start, sb.Len()}
		sb.WriteString(twinSuffix)
	}
	names := sb.Len()
	for _, e := range ends[:rows] { // an unnamed row's span stays zero
		if wide {
			sb.Write([]byte{byte(e[0]), byte(e[0] >> 8), byte(e[0] >> 16), byte(e[0] >> 24), byte(e[1]), byte(e[1] >> 8), byte(e[1] >> 16), byte(e[1] >> 24)})
		} else {
			sb.Write([]byte{byte(e[0]), byte(e[0] >> 8), byte(e[1]), byte(e[1] >> 8)})
		}
	}
	return &Buckets{Layout: l, all: sb.String(), names: uint32(names), rows: uint8(rows), wide: wide}
}

// Table is the policy table compiled for one vendor's limits (the
// defaults, or an override): its rows, and per route the checks a request
// makes and its RateLimit-Policy value.
type Table struct {
	Policies []Policy
	plans    []Plan // by route index
}

// Plan is what a request to one route is checked against under a table.
type Plan struct {
	count  int
	checks [MaxChecks]Check // Key left empty: a key's bucket names fill it
	// wcount and wchecks are the checks of quotas and sliding windows
	// (package window decides them), apart from the GCRA checks.
	wcount  int
	wchecks [MaxChecks]Check
	// slots are the concurrency rows the route counts: the row's index
	// and its cap (8 bytes each: a plan is kept per route and per vendor
	// override).
	nslots int
	slots  [MaxChecks]struct{ row, limit int32 }
	// Policy is the RateLimit-Policy value: the enforced limits; nil when
	// none (shadow limits never refuse, so clients are not told of them).
	Policy []byte
	// Refunds: some check gives its tokens back when the gateway fails
	// the request for the backend (Rate.Refund).
	Refunds bool
}

// NewTable compiles rows for the routes: routeClasses[i] is the classes
// route i counts. It refuses a table past MaxPolicies rows or a route past
// MaxChecks limits (a row and its twin count two), and a row whose class
// no route counts.
func NewTable(rows []Policy, routeClasses [][]string) (*Table, error) {
	if len(rows) > MaxPolicies {
		return nil, fmt.Errorf("limits: %d policies, at most %d", len(rows), MaxPolicies)
	}
	t := &Table{Policies: rows, plans: make([]Plan, len(routeClasses))}
	counted := make(map[string]bool)
	for ri, classes := range routeClasses {
		p := &t.plans[ri]
		for _, c := range classes {
			counted[c] = true
		}
		for i, row := range rows {
			if !slices.Contains(classes, row.Class) || !row.On() {
				continue
			}
			if row.Kind == Concurrency {
				if p.nslots == MaxChecks {
					return nil, fmt.Errorf("limits: a route counting %s is subject to more than %d concurrency limits", strings.Join(classes, ", "), MaxChecks)
				}
				p.slots[p.nslots].row, p.slots[p.nslots].limit = int32(i), int32(min(row.Limit, math.MaxInt32))
				p.nslots++
				continue
			}
			if row.Kind != GCRA {
				// A quota or a sliding window: no twin, its own list.
				if p.count+p.wcount+1 > MaxChecks {
					return nil, fmt.Errorf("limits: a route counting %s is subject to more than %d limits (shadow twins count)", strings.Join(classes, ", "), MaxChecks)
				}
				p.wchecks[p.wcount] = Check{Rate: row.Rate, Policy: i}
				p.wcount++
				continue
			}
			if p.count+p.wcount+1+btoi(row.Twin.Valid()) > MaxChecks {
				return nil, fmt.Errorf("limits: a route counting %s is subject to more than %d limits (shadow twins count)", strings.Join(classes, ", "), MaxChecks)
			}
			p.checks[p.count] = Check{Rate: row.Rate, Policy: i}
			p.count++
			p.Refunds = p.Refunds || row.Refund
			if row.Twin.Valid() {
				// The twin counts the same requests: the same cost, and
				// given back when they are.
				tw := row.Twin
				tw.Name, tw.Shadow, tw.Cost, tw.Refund = row.Name, true, row.Cost, row.Refund
				p.checks[p.count] = Check{Rate: tw, Policy: i, Twin: true}
				p.count++
			}
			if !row.Shadow {
				p.Policy = appendPolicy(p.Policy, row.Rate)
			}
		}
	}
	for _, row := range rows {
		for _, r := range []Rate{row.Rate, row.Twin} {
			if r.Valid() && row.Tokens() > r.EffectiveBurst() {
				return nil, fmt.Errorf("limits: policy %q costs %d tokens a request, more than its burst of %d: it would refuse every request", row.Name, row.Tokens(), r.EffectiveBurst())
			}
		}
		if row.On() && !counted[row.Class] {
			classes := make([]string, 0, len(counted))
			for c := range counted {
				classes = append(classes, c)
			}
			slices.Sort(classes)
			return nil, fmt.Errorf("limits: policy %q counts class %q, which no route counts (the classes routes count: %s)",
				row.Name, row.Class, strings.Join(classes, ", "))
		}
	}
	return t, nil
}

// Plan returns the plan of the route at index route.
func (t *Table) Plan(route int) *Plan { return &t.plans[route] }

// Checks sets cs to the plan's checks on a key's buckets b, in place: the
// first Count of its List (the rest is left as it was, unread), not the
// whole List copied and returned by value.
func (p *Plan) Checks(cs *Checks, b *Buckets) {
	cs.Count = p.count
	for i := 0; i < p.count; i++ {
		c := &cs.List[i]
		*c = p.checks[i]
		if c.Twin {
			c.Key = b.Name(c.Policy).Twin
		} else {
			c.Key = b.Name(c.Policy).Key
		}
	}
}

// Windowed reports whether the plan has quota or sliding window checks.
func (p *Plan) Windowed() bool { return p.wcount > 0 }

// Windows sets cs to the plan's quota and sliding window checks on a key's
// buckets b, as Checks does for its GCRA checks.
func (p *Plan) Windows(cs *Checks, b *Buckets) {
	cs.Count = p.wcount
	for i := 0; i < p.wcount; i++ {
		c := &cs.List[i]
		*c = p.wchecks[i]
		c.Key = b.Name(c.Policy).Key
	}
}

// Draft is the revision of the IETF draft "RateLimit header fields for
// HTTP" that the RateLimit-Policy and RateLimit fields follow, as /docs
// cites it. Moving to another revision is this block: the revision and its
// parameter keys; every header and the /docs examples are written from
// them by AppendPolicy and AppendState.
const Draft = "draft-ietf-httpapi-ratelimit-headers-10"

// The parameter keys of Draft's fields: a policy's quota and window
// (RateLimit-Policy), a policy's remaining quota and the seconds until it
// resets (RateLimit).
const (
	DraftQuota     = "q"
	DraftWindow    = "w"
	DraftRemaining = "r"
	DraftReset     = "t"
)

// The keys as appendEntry writes them.
const (
	keyQuota     = `";` + DraftQuota + "="
	keyWindow    = ";" + DraftWindow + "="
	keyRemaining = `";` + DraftRemaining + "="
	keyReset     = ";" + DraftReset + "="
)

// AppendPolicy appends one RateLimit-Policy entry, "name";q=quota;w=window
// in whole seconds (rounded up), to b (", " first when b holds one
// already).
func AppendPolicy(b []byte, name string, quota int, window time.Duration) []byte {
	return appendEntry(b, name, keyQuota, quota, keyWindow, window)
}

// AppendState appends one RateLimit entry, "name";r=remaining;t=reset in
// whole seconds (rounded up), to b (", " first when b holds one already).
func AppendState(b []byte, name string, remaining int, reset time.Duration) []byte {
	return appendEntry(b, name, keyRemaining, remaining, keyReset, reset)
}

// appendEntry appends one entry of either header: the quoted name, the
// count's key (count) and n, the span's key (span) and d in whole seconds,
// rounded up.
func appendEntry(b []byte, name, count string, n int, span string, d time.Duration) []byte {
	if len(b) > 0 {
		b = append(b, ", "...)
	}
	b = append(b, '"')
	b = append(b, name...)
	b = append(b, count...)
	b = strconv.AppendInt(b, int64(n), 10)
	b = append(b, span...)
	return strconv.AppendInt(b, int64((d+time.Second-1)/time.Second), 10)
}

// Slots is the number of the plan's concurrency rows: 0 for a route that
// counts none (the request path then asks for no slot).
func (p *Plan) Slots() int { return p.nslots }

// Slot is the plan's concurrency row i on a key's buckets b: its bucket
// name, its cap and its row index.
func (p *Plan) Slot(i int, b *Buckets) (key string, limit, row int) {
	c := &p.slots[i]
	return b.Name(int(c.row)).Key, int(c.limit), int(c.row)
}

// appendPolicy appends r to a RateLimit-Policy value: "name";q=quota;w=seconds.
func appendPolicy(b []byte, r Rate) []byte {
	return AppendPolicy(b, r.Name, r.Quota(), r.Period)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
