package usage

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"vendorgate/shared/testredis"
)

const (
	vendorA = "7d9f2a4e-1b3c-4d5e-8f60-718293a4b5c6"
	vendorB = "v-not-a-uuid"
)

// clock is a settable clock for buckets.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newClock() *clock {
	// Near the real time: Redis expires buckets by its own clock.
	return &clock{t: time.Now().UTC().Truncate(time.Hour).Add(30*time.Minute + 10*time.Second)}
}

// The first rows of the gateway's policy table, by index.
const (
	Reads Policy = iota
	Orders
	KeyReads
	KeyOrders
)

// testNames are the first rows' names, by index.
var testNames = []string{"reads", "orders", "key-reads", "key-orders"}

func limits(vendor string) []Limit {
	return []Limit{{Name: "reads", Quota: 120, Period: time.Minute, On: true}, {Name: "orders", Quota: 10, Period: time.Minute, On: true},
		{Name: "key-reads"}, {Name: "key-orders"}}
}

func redisStore(t testing.TB, srv *testredis.Server) *Redis {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	s, err := NewRedis(RedisOptions{Client: c, Timeout: 300 * time.Millisecond, GuardTTL: testGuardTTL})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// recorder returns a recorder whose flusher never fires on its own (a
// long interval): the test flushes.
func recorder(t testing.TB, st Store, clk *clock) *Recorder {
	t.Helper()
	r, err := New(testOptions(st, clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func count(c *Counter, p Policy, allowed, limited, shadow int) {
	for i := 0; i < allowed; i++ {
		c.Allowed(p)
	}
	for i := 0; i < limited; i++ {
		c.Limited(p)
	}
	for i := 0; i < shadow; i++ {
		c.ShadowLimited(p)
	}
}

func findRow(t *testing.T, top *Top, vendor, limit string) TopRow {
	t.Helper()
	for _, r := range top.Rows {
		if r.VendorID == vendor && r.Limit == limit {
			return r
		}
	}
	t.Fatalf("no row for %s %s in %+v", vendor, limit, top.Rows)
	return TopRow{}
}

func stores(t *testing.T, clk *clock) map[string]func() Store {
	srv := testredis.Start(t)
	return map[string]func() Store{
		"redis": func() Store { return redisStore(t, srv) },
		"local": func() Store { return NewLocal(clk.Now) },
	}
}

// Two replicas count one vendor over its limit and one under it; the top
// list sums both exactly and ranks the refused vendor first.
func TestTopSumsReplicas(t *testing.T) {
	clk := newClock()
	for name, mk := range stores(t, clk) {
		t.Run(name, func(t *testing.T) {
			st := mk()
			r1, r2 := recorder(t, st, clk), recorder(t, st, clk)
			count(r1.For(vendorA), Reads, 100, 30, 0)
			count(r2.For(vendorA), Reads, 20, 50, 0)
			count(r1.For(vendorB), Reads, 40, 0, 7)
			count(r2.For(vendorB), Orders, 3, 0, 0)
			r1.Close()
			r2.Close()
			rd := &Reader{Store: st, Limits: limits, Now: clk.Now}
			top, err := rd.Top(time.Hour, 20)
			if err != nil {
				t.Fatal(err)
			}
			if len(top.Rows) != 3 {
				t.Fatalf("rows = %+v, want 3", top.Rows)
			}
			first := top.Rows[0]
			if first.VendorID != vendorA || first.Limit != "reads" || first.Allowed != 120 || first.Limited != 80 ||
				first.PeakPerMinute != 200 || first.Quota != 120 || first.PeriodSeconds != 60 {
				t.Fatalf("first row = %+v", first)
			}
			b := findRow(t, top, vendorB, "reads")
			if b.Allowed != 40 || b.ShadowLimited != 7 || b.Limited != 0 {
				t.Fatalf("vendor B reads = %+v", b)
			}
			if top.Rows[1] != b {
				t.Fatalf("shadow refusals rank second: %+v", top.Rows)
			}
			if o := findRow(t, top, vendorB, "orders"); o.Allowed != 3 || o.Quota != 10 {
				t.Fatalf("vendor B orders = %+v", o)
			}
			if top1, _ := rd.Top(time.Hour, 1); len(top1.Rows) != 1 {
				t.Fatalf("top=1 gave %d rows", len(top1.Rows))
			}
		})
	}
}

// Minutes land in their own buckets, and a window over an hour reads hours.
func TestVendorMinutesAndHours(t *testing.T) {
	clk := newClock()
	for name, mk := range stores(t, clk) {
		t.Run(name, func(t *testing.T) {
			st := mk()
			r := recorder(t, st, clk)
			c := r.For(vendorA)
			count(c, Reads, 5, 1, 0)
			r.Flush()
			clk.Add(time.Minute)
			count(c, Reads, 7, 0, 2)
			r.Flush()
			clk.Add(2 * time.Hour) // the first hour is now past the minute buckets
			count(c, Orders, 4, 0, 0)
			r.Close()

			rd := &Reader{Store: st, Limits: limits, Now: clk.Now}
			vu, ok, err := rd.Vendor(vendorA, 3*time.Hour)
			if err != nil || !ok {
				t.Fatalf("vendor: ok=%v err=%v", ok, err)
			}
			var reads, orders *PolicyUsage
			for i := range vu.Policies {
				switch vu.Policies[i].Limit {
				case "reads":
					reads = &vu.Policies[i]
				case "orders":
					orders = &vu.Policies[i]
				}
			}
			if reads == nil || orders == nil {
				t.Fatalf("policies = %+v", vu.Policies)
			}
			var hourRow *Bucket
			for i, b := range reads.Minutes {
				if b.Seconds == 3600 && b.Allowed > 0 {
					hourRow = &reads.Minutes[i]
				}
			}
			if hourRow == nil || hourRow.Allowed != 12 || hourRow.Limited != 1 || hourRow.ShadowLimited != 2 {
				t.Fatalf("hour row = %+v in %+v", hourRow, reads.Minutes)
			}
			last := orders.Minutes[len(orders.Minutes)-1]
			if last.Seconds != 60 || last.Allowed != 4 {
				t.Fatalf("last minute of orders = %+v", last)
			}
			// Over an hour, the top list reads the hour buckets and their peaks.
			top, err := rd.Top(3*time.Hour, 10)
			if err != nil {
				t.Fatal(err)
			}
			if row := findRow(t, top, vendorA, "reads"); row.Allowed != 12 || row.PeakPerMinute != 7+2-2 {
				t.Fatalf("3h reads row = %+v", row)
			}
			if _, ok, _ := rd.Vendor("nobody", time.Hour); ok {
				t.Fatal("a vendor with no usage reads as found")
			}
		})
	}
}

// A flush that timed out after Redis had received it is retried, and the
// retry is not counted again; deltas counted while Redis was down arrive
// once it is back.
func TestFlushRetriedOnce(t *testing.T) {
	clk := newClock()
	srv := testredis.Start(t)
	st := redisStore(t, srv)
	var mu sync.Mutex
	var errs []error
	o := testOptions(st, clk.Now)
	o.OnFlush = func(rep FlushReport) {
		mu.Lock()
		errs = append(errs, rep.Err)
		mu.Unlock()
	}
	r, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	c := r.For(vendorA)
	count(c, Reads, 10, 0, 0)
	r.Flush() // loads the script while Redis answers

	count(c, Reads, 5, 2, 0)
	srv.Pause() // the flush reaches Redis's socket but times out unanswered
	r.Flush()
	srv.Resume()
	time.Sleep(200 * time.Millisecond) // Redis runs the queued flush now
	mu.Lock()
	if len(errs) != 2 || errs[0] != nil || errs[1] == nil {
		t.Fatalf("flush errors = %v, want nil then a timeout", errs)
	}
	mu.Unlock()
	r.Flush() // the retry: Redis applied it already, so it is skipped
	rd := &Reader{Store: st, Limits: limits, Now: clk.Now}
	top, err := rd.Top(time.Hour, 10)
	if err != nil {
		t.Fatal(err)
	}
	if row := findRow(t, top, vendorA, "reads"); row.Allowed != 15 || row.Limited != 2 {
		t.Fatalf("after the retry reads = %+v, want allowed 15 limited 2", row)
	}

	srv.Stop()
	count(c, Reads, 1, 0, 0)
	r.Flush() // refused: kept
	srv.Restart(t)
	// The restarted server lost everything (no persistence): what it gets
	// now is the flush kept while it was down.
	r.Flush()
	mu.Lock()
	if last := errs[len(errs)-1]; last != nil {
		t.Fatalf("flush after restart: %v", last)
	}
	mu.Unlock()
	r.Flush() // nothing pending: nothing sent again
	r.Close()
	if top, err = rd.Top(time.Hour, 10); err != nil {
		t.Fatal(err)
	}
	if row := findRow(t, top, vendorA, "reads"); row.Allowed != 1 || row.Limited != 0 {
		t.Fatalf("after restart reads = %+v, want allowed 1 (the flush kept while Redis was down, once)", row)
	}
}

// Applying the same flush twice counts it once.
func TestApplyOnce(t *testing.T) {
	clk := newClock()
	for name, mk := range stores(t, clk) {
		t.Run(name, func(t *testing.T) {
			st := mk()
			d := &Delta{ID: "x-1", Minute: clk.Now().Unix() / 60, Rows: []Row{{Vendor: vendorA}}, Names: testNames}
			d.Rows[0].Add(0, 3)
			for i := 0; i < 3; i++ {
				if errs := st.Apply([]*Delta{d}); errs != nil && errs[0] != nil {
					t.Fatal(errs[0])
				}
			}
			rd := &Reader{Store: st, Limits: limits, Now: clk.Now}
			top, _ := rd.Top(time.Minute, 1)
			if row := findRow(t, top, vendorA, "reads"); row.Allowed != 3 {
				t.Fatalf("allowed = %d, want 3", row.Allowed)
			}
		})
	}
}

// A flush of many vendors goes out in chunks, all of them applied.
func TestManyVendorsChunked(t *testing.T) {
	clk := newClock()
	srv := testredis.Start(t)
	st := redisStore(t, srv)
	r := recorder(t, st, clk)
	const n = 3*chunkRows + 17
	for i := 0; i < n; i++ {
		r.For("vendor-" + itoa(uint64(i))).Allowed(Orders)
	}
	r.Close()
	top, err := (&Reader{Store: st, Limits: limits, Now: clk.Now}).Top(time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(top.Rows) != n {
		t.Fatalf("rows = %d, want %d", len(top.Rows), n)
	}
}

func TestCountingDoesNotAllocate(t *testing.T) {
	r, err := New(testOptions(NewLocal(nil), nil))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := r.For(vendorA)
	if n := testing.AllocsPerRun(1000, func() { c.Allowed(Reads); c.Limited(KeyOrders); c.ShadowLimited(Orders) }); n != 0 {
		t.Fatalf("%v allocations per count", n)
	}
	var nilCounter *Counter
	nilCounter.Allowed(Reads) // a gateway without a recorder counts nothing
}

func TestParseWindow(t *testing.T) {
	for in, want := range map[string]time.Duration{"": time.Hour, "15m": 15 * time.Minute, "24h": 24 * time.Hour} {
		if got, err := ParseWindow(in); err != nil || got != want {
			t.Errorf("ParseWindow(%q) = %v, %v", in, got, err)
		}
	}
	for _, in := range []string{"25h", "30s", "90s", "x", "-1h"} {
		if _, err := ParseWindow(in); !errors.Is(err, ErrWindow) {
			t.Errorf("ParseWindow(%q) err = %v, want ErrWindow", in, err)
		}
	}
}

// The Redis store's script and the in-process store add the same flushes to
// the same buckets: every counter of every policy, zeros between counts,
// vendors in some flushes only, two minutes of one hour, and each hour's
// peak minute demand per policy.
func TestRedisAddsAsLocalDoes(t *testing.T) {
	clk := newClock()
	srv := testredis.Start(t)
	rs, ls := redisStore(t, srv), NewLocal(clk.Now)
	rng := rand.New(rand.NewPCG(1, 2))
	vendors := []string{vendorA, vendorB, "0b1e9c53-6d2a-4f71-9e84-2c5d7a3f6b10"}
	first := clk.Now().Unix() / 60
	for f := 0; f < 40; f++ {
		// Names for most indexes, in an order of their own, and one index
		// without a name (its counts are not kept).
		d := &Delta{ID: "d-" + strconv.Itoa(f), Minute: first + int64(f%2),
			Names: []string{"orders", "reads", "", "p3", "p4", "p5", "p6", "p7", "p8", "p9", "p10", "p11", "p12", "p13", "p14", "last"}}
		for _, v := range vendors {
			if rng.IntN(3) == 0 {
				continue // not in this flush
			}
			row := Row{Vendor: v}
			for i := range numValues {
				if rng.IntN(4) == 0 {
					row.Add(i, uint64(rng.IntN(1000)))
				}
			}
			d.Rows = append(d.Rows, row)
		}
		for name, st := range map[string]Store{"redis": rs, "local": ls} {
			if errs := st.Apply([]*Delta{d}); errs != nil && errs[0] != nil {
				t.Fatalf("%s: %v", name, errs[0])
			}
		}
	}
	minutes, hours := []int64{first, first + 1}, []int64{first / 60}
	want, err := ls.Read(minutes, hours)
	if err != nil {
		t.Fatal(err)
	}
	got, err := rs.Read(minutes, hours)
	if err != nil {
		t.Fatal(err)
	}
	if len(want.Minutes[first]) != len(vendors) || len(want.Hours[first/60]) != len(vendors) {
		t.Fatalf("the in-process store holds %d vendors in the first minute, %d in the hour; want %d",
			len(want.Minutes[first]), len(want.Hours[first/60]), len(vendors))
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("redis buckets\n%+v\nin-process\n%+v", got, want)
	}
}

// captured is a Store that keeps what it is given.
type captured struct {
	mu     sync.Mutex
	deltas []*Delta
}

func (s *captured) Apply(ds []*Delta) []error {
	s.mu.Lock()
	s.deltas = append(s.deltas, ds...)
	s.mu.Unlock()
	return nil
}

func (s *captured) Read([]int64, []int64) (Buckets, error) { return Buckets{}, nil }

// TestEveryPolicyIsCounted: a vendor counted under every policy of a full
// table, each of the three counts its own number, flushes each where it
// belongs, those past the Counter's own room too, and counts nothing
// twice; the Counter of a table of up to four policies takes 64 bytes, and
// counting past them allocates once, not per count.
func TestEveryPolicyIsCounted(t *testing.T) {
	st := &captured{}
	r, err := New(testOptions(st, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := r.For(vendorA)
	var want [numValues]uint64
	for p := Policy(0); p < MaxPolicies; p++ {
		a, l, s := int(p)+1, int(p)+2, int(p)+3
		count(c, p, a, l, s)
		want[int(p)*numCounters+cAllowed], want[int(p)*numCounters+cLimited], want[int(p)*numCounters+cShadow] = uint64(a), uint64(l), uint64(s)
	}
	if n := testing.AllocsPerRun(100, func() { c.Allowed(MaxPolicies - 1) }); n != 0 {
		t.Fatalf("%v allocations per count past the inline policies", n)
	}
	want[(MaxPolicies-1)*numCounters+cAllowed] += 101 // AllocsPerRun runs once more
	r.Flush()
	r.Flush() // nothing more counted: no second delta
	if len(st.deltas) != 1 || len(st.deltas[0].Rows) != 1 {
		t.Fatalf("%d deltas, want one of one row", len(st.deltas))
	}
	if got := st.deltas[0].Rows[0].values(); got != want {
		t.Fatalf("flushed %v\nwant    %v", got, want)
	}
	if size := unsafe.Sizeof(Counter{}); size != 64 {
		t.Fatalf("a Counter takes %d bytes, want 64", size)
	}
}

// TestCollectMakesRoomForTheCountedOnly: a flush's rows are made at once
// for the vendors counted since the last (not for every vendor the
// recorder knows, nor grown one at a time), and a flush with nothing
// counted makes none.
func TestCollectMakesRoomForTheCountedOnly(t *testing.T) {
	r, err := New(testOptions(NewLocal(nil), nil))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cs := make([]*Counter, 1000)
	for i := range cs {
		cs[i] = r.For("vendor-" + strconv.Itoa(i))
	}
	for i := 0; i < len(cs); i += 100 {
		cs[i].Allowed(Reads)
	}
	cs[999].ShadowLimited(MaxPolicies - 1) // counted past the inline policies only
	d := r.collect(time.Now())
	if d == nil || len(d.Rows) != 11 || cap(d.Rows) != 11 {
		t.Fatalf("rows %d, room for %d: want 11 and 11", len(d.Rows), cap(d.Rows))
	}
	if d := r.collect(time.Now()); d != nil {
		t.Fatalf("%d rows with nothing counted", len(d.Rows))
	}
}
