package usage

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"vendorgate/shared/testredis"
)

// A table whose rows change places between two flushes (a row inserted
// before the others) keeps each policy's history under its name: usage is
// stored by name, not by the row's index.
func TestReorderedTableKeepsNames(t *testing.T) {
	clk := newClock()
	for name, mk := range stores(t, clk) {
		t.Run(name, func(t *testing.T) {
			st := mk()
			names := []string{"reads", "orders"}
			o := testOptions(st, clk.Now)
			o.Names = func() []string { return names }
			r, err := New(o)
			if err != nil {
				t.Fatal(err)
			}
			count(r.For(vendorA), 0, 5, 0, 0) // reads at 0
			count(r.For(vendorA), 1, 2, 0, 0) // orders at 1
			r.Flush()
			names = []string{"downloads", "orders", "reads"}
			count(r.For(vendorA), 0, 1, 0, 0) // downloads at 0
			count(r.For(vendorA), 2, 3, 1, 0) // reads at 2 now
			r.Close()
			top, err := (&Reader{Store: st, Limits: limits, Now: clk.Now}).Top(time.Hour, 0)
			if err != nil {
				t.Fatal(err)
			}
			if row := findRow(t, top, vendorA, "reads"); row.Allowed != 8 || row.Limited != 1 || row.Quota != 120 {
				t.Fatalf("reads = %+v, want 8 allowed, 1 limited over both tables", row)
			}
			if row := findRow(t, top, vendorA, "orders"); row.Allowed != 2 {
				t.Fatalf("orders = %+v", row)
			}
			// A name no row of the view's table has is shown, without a quota.
			if row := findRow(t, top, vendorA, "downloads"); row.Allowed != 1 || row.Quota != 0 {
				t.Fatalf("downloads = %+v", row)
			}
			vu, ok, err := (&Reader{Store: st, Limits: limits, Now: clk.Now}).Vendor(vendorA, time.Hour)
			if err != nil || !ok {
				t.Fatal(ok, err)
			}
			var got []string
			for _, p := range vu.Policies {
				got = append(got, p.Limit)
			}
			if strings.Join(got, " ") != "reads orders downloads" {
				t.Fatalf("the vendor's policies %v; want the table's rows on or used, then names gone from it", got)
			}
		})
	}
}

// v2 is a bucket of the v2 format: counts by index, 8 policies a value
// (allowed, limited, shadow each), an hour's 8 peaks after them.
func v2(values map[int][3]uint64, peaks map[int]uint64) string {
	var all [legacyPolicies*numCounters + legacyPolicies]uint64
	for p, v := range values {
		copy(all[p*numCounters:], v[:])
	}
	for p, v := range peaks {
		all[legacyPolicies*numCounters+p] = v
	}
	return encode(all[:])
}

// TestMigrateV2: buckets an older gateway stored by row index (the v2
// format), minutes and hours, are read after the upgrade under the names
// of the table's rows at those indexes, added to what the new gateways
// stored meanwhile (an hour's peak: the larger); the old buckets are gone,
// and a second migration counts nothing twice.
func TestMigrateV2(t *testing.T) {
	srv := testredis.Start(t)
	st := redisStore(t, srv)
	st.o.Timeout = 5 * time.Second
	clk := &clock{t: time.Now()}
	nowMin := clk.Now().Unix() / 60
	lastHour := nowMin/60 - 2 // an hour of the hour buckets only
	// Index 0 reads, 1 orders, 4 an added policy "downloads"; index 2
	// (key-reads, off) holds nothing.
	srv.Do(t, "HSET", legacyTag+"m:"+strconv.FormatInt(nowMin, 10),
		field(vendorA), v2(map[int][3]uint64{0: {100, 7, 0}, 1: {3, 0, 0}, 4: {2, 1, 0}}, nil),
		field(vendorB), v2(map[int][3]uint64{0: {1, 0, 4}}, nil))
	srv.Do(t, "EXPIRE", legacyTag+"m:"+strconv.FormatInt(nowMin, 10), "3600")
	srv.Do(t, "HSET", legacyTag+"h:"+strconv.FormatInt(lastHour, 10),
		field(vendorA), v2(map[int][3]uint64{0: {500, 20, 0}, 4: {9, 0, 0}}, map[int]uint64{0: 90, 4: 3}))
	// A new gateway counted in the hour already (v3): reads 10, a peak of 95.
	row := Row{Vendor: vendorA}
	row.Add(0, 95)
	if errs := st.Apply([]*Delta{{ID: "new-1", Minute: lastHour*60 + 5, Names: testNames,
		Rows: []Row{row}}}); errs != nil && errs[0] != nil {
		t.Fatal(errs[0])
	}
	names := []string{"reads", "orders", "key-reads", "key-orders", "downloads"}
	moved, err := st.Migrate(names)
	if err != nil || moved != 3 {
		t.Fatalf("Migrate moved %d vendor rows, %v; want 3", moved, err)
	}
	for _, k := range []string{legacyTag + "m:" + strconv.FormatInt(nowMin, 10), legacyTag + "h:" + strconv.FormatInt(lastHour, 10)} {
		if got := srv.Do(t, "EXISTS", k); got != ":0" {
			t.Fatalf("%s still exists after the migration", k)
		}
	}
	if ttl := srv.Do(t, "TTL", minuteKey(nowMin)); ttl == ":-1" {
		t.Fatal("the migrated minute bucket never expires")
	}
	if moved, err := st.Migrate(names); err != nil || moved != 0 {
		t.Fatalf("a second migration moved %d, %v", moved, err)
	}
	all := func(vendor string) []Limit {
		return append(limits(vendor), Limit{Name: "downloads", Quota: 5, Period: time.Minute, On: true})
	}
	rd := &Reader{Store: st, Limits: all, Now: clk.Now}
	top, err := rd.Top(time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r := findRow(t, top, vendorA, "reads"); r.Allowed != 100 || r.Limited != 7 {
		t.Fatalf("last hour's reads of A: %+v", r)
	}
	if r := findRow(t, top, vendorA, "downloads"); r.Allowed != 2 || r.Limited != 1 || r.Quota != 5 {
		t.Fatalf("last hour's downloads of A: %+v", r)
	}
	if r := findRow(t, top, vendorA, "orders"); r.Allowed != 3 {
		t.Fatalf("last hour's orders of A: %+v", r)
	}
	if r := findRow(t, top, vendorB, "reads"); r.Allowed != 1 || r.ShadowLimited != 4 {
		t.Fatalf("last hour's reads of B: %+v", r)
	}
	day, err := rd.Top(24*time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	// A day reads the hour buckets (this test wrote no v2 hour for the
	// current hour's minute).
	if r := findRow(t, day, vendorA, "reads"); r.Allowed != 500+95 || r.Limited != 20 || r.PeakPerMinute != 95 {
		t.Fatalf("the day's reads of A: %+v; want 595 allowed (v2 500, v3 95), 20 limited, peak 95 (v3's, above v2's 90)", r)
	}
	if r := findRow(t, day, vendorA, "downloads"); r.Allowed != 9 || r.PeakPerMinute != 3 {
		t.Fatalf("the day's downloads of A: %+v", r)
	}
	b, err := st.Read(nil, []int64{lastHour})
	if err != nil {
		t.Fatal(err)
	}
	if c := b.Hours[lastHour][vendorA]["reads"]; c.Peak != 95 {
		t.Fatalf("the hour's reads peak %d; want 95, the larger of v2's 90 and v3's 95", c.Peak)
	}
}
