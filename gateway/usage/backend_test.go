package usage_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"vendorgate/backend"
	"vendorgate/backend/billing"
	"vendorgate/config"
	"vendorgate/gateway/usage"
	"vendorgate/shared/wire"
)

const (
	backendInternalToken = "usage-test-internal-token-0123456789"
	backendAdminToken    = "usage-test-admin-token-0123456789"
)

// startBackend runs the real backend in process on loopback ports with a
// SQLite file, and returns it and its vendor/internal and admin URLs.
func startBackend(t *testing.T) (b *backend.Backend, api, admin string) {
	t.Helper()
	dir := t.TempDir()
	cfg := config.DefaultBackend()
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Database, cfg.ReportsDir = filepath.Join(dir, "vg.db"), filepath.Join(dir, "reports")
	cfg.PublicBaseURL, cfg.InternalToken, cfg.AdminToken = "http://gw.example:8080", backendInternalToken, backendAdminToken
	cfg.KeySigningSecrets = config.List{"usage-test-key-signing-secret-0123456789"}
	b, err := backend.New(context.Background(), backend.Options{Config: cfg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = b.Shutdown(ctx)
	})
	return b, "http://" + b.Addr(), "http://" + b.AdminAddr()
}

// post is what the gateway's backend client does with a flush part.
func post(api string) func(ctx context.Context, body []byte) error {
	return func(ctx context.Context, body []byte) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, api+wire.UsageFlushPath, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set(wire.HeaderInternalToken, backendInternalToken)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK {
			return fmt.Errorf("backend answered %d: %s", res.StatusCode, b)
		}
		return nil
	}
}

func monthOf(t *testing.T, admin string) billing.MonthReport {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, admin+"/admin/v1/usage/month", nil)
	req.Header.Set("Authorization", "Bearer "+backendAdminToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var r billing.MonthReport
	if err := json.NewDecoder(res.Body).Decode(&r); err != nil || res.StatusCode != 200 {
		t.Fatalf("month report: %d %v", res.StatusCode, err)
	}
	return r
}

// TestBackendStoreCountsARetriedFlushOnce: a recorder flushing through a
// Tee into the in-process buckets and the real backend keeps a flush whose
// answer was lost and sends it again; the backend's month report counts it
// once, and the buckets too.
func TestBackendStoreCountsARetriedFlushOnce(t *testing.T) {
	_, api, admin := startBackend(t)
	var lose atomic.Bool
	send := post(api)
	be, err := usage.NewBackend(usage.BackendOptions{Timeout: 5 * time.Second, Post: func(ctx context.Context, body []byte) error {
		err := send(ctx, body)
		if err == nil && lose.Swap(false) {
			return errors.New("answer lost") // the backend took it; the gateway does not know
		}
		return err
	}})
	if err != nil {
		t.Fatal(err)
	}
	local := usage.NewLocal(nil)
	var pending atomic.Int64
	r, err := usage.New(usage.Options{Stores: []usage.Store{local, be}, Interval: time.Minute, MaxAge: time.Hour, MaxBytes: 32 << 20,
		Names:   func() []string { return []string{"standard", "burst"} },
		OnFlush: func(rep usage.FlushReport) { pending.Store(int64(rep.Pending)) }})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := r.For("vendor-a")
	for range 5 {
		c.Allowed(0)
	}
	c.Limited(0)
	c.Limited(0)
	c.ShadowLimited(1)
	r.For("vendor-b").Allowed(1)

	lose.Store(true)
	r.Flush()
	if pending.Load() != 1 {
		t.Fatalf("after a lost answer %d flushes pending, want 1", pending.Load())
	}
	c.Allowed(0)
	r.Flush() // the kept flush again, and the new one
	if pending.Load() != 0 {
		t.Fatalf("after the retry %d flushes pending, want 0", pending.Load())
	}
	m := monthOf(t, admin)
	got := map[string]billing.PolicyMonth{}
	for _, v := range m.Vendors {
		for _, p := range v.Requests {
			got[v.VendorID+"/"+p.Policy] = p
		}
	}
	want := map[string]billing.PolicyMonth{
		"vendor-a/standard": {Policy: "standard", Requests: 8, Allowed: 6, Limited: 2},
		"vendor-a/burst":    {Policy: "burst", ShadowLimited: 1},
		"vendor-b/burst":    {Policy: "burst", Requests: 1, Allowed: 1},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("month's requests = %v, want %v", got, want)
	}
}

// TestFlushPartsSplitStably: a flush of more rows than a request takes is
// split into parts of at most wire.MaxUsageFlushRows, named the same on
// every call, so a retry of a part is the same part.
func TestFlushPartsSplitStably(t *testing.T) {
	d := &usage.Delta{ID: "gw-7", Minute: 100, Names: []string{"standard"}}
	for i := range wire.MaxUsageFlushRows + 3 {
		var row usage.Row
		row.Vendor = fmt.Sprintf("v%04d", i)
		row.Add(0, 1)
		d.Rows = append(d.Rows, row)
	}
	parts := usage.FlushParts(d)
	if len(parts) != 2 || parts[0].ID != "gw-7/1" || parts[1].ID != "gw-7/2" || len(parts[0].Rows) != wire.MaxUsageFlushRows || len(parts[1].Rows) != 3 {
		t.Fatalf("parts: %d, ids %s %s", len(parts), parts[0].ID, parts[len(parts)-1].ID)
	}
	again := usage.FlushParts(d)
	a, _ := json.Marshal(parts)
	b, _ := json.Marshal(again)
	if !bytes.Equal(a, b) {
		t.Error("the same delta split differently")
	}
	if one := usage.FlushParts(&usage.Delta{ID: "gw-8", Minute: 1, Names: []string{"standard"}, Rows: d.Rows[:1]}); len(one) != 1 || one[0].ID != "gw-8" {
		t.Errorf("a small delta: %+v", one)
	}
}

// TestBackendApplyHoldsOnePart: posting a large flush holds one part's rows
// at a time, not the whole flush's: 20,000 vendors' rows are 1.3 MB as the
// backend takes them, a part's 500 of them 32 kB. It posts the same parts
// FlushParts names, in order.
func TestBackendApplyHoldsOnePart(t *testing.T) {
	d := &usage.Delta{ID: "gw-9", Minute: 100, Names: []string{"standard"}}
	for i := range 20000 {
		var row usage.Row
		row.Vendor = fmt.Sprintf("v%05d", i)
		row.Add(0, 1)
		d.Rows = append(d.Rows, row)
	}
	var want [][]byte
	for _, f := range usage.FlushParts(d) {
		b, _ := json.Marshal(f)
		want = append(want, b)
	}
	heap := func() int64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	var got [][]byte
	var grew int64
	st, err := usage.NewBackend(usage.BackendOptions{Timeout: time.Minute, Post: func(_ context.Context, body []byte) error {
		if len(got) == 0 {
			grew = heap() - int64(len(body))
		}
		got = append(got, body)
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	before := heap()
	if errs := st.Apply([]*usage.Delta{d}); errs != nil {
		t.Fatal(errs)
	}
	if grew -= before; grew > 256<<10 {
		t.Errorf("posting the first part, the heap held %d kB more than before the flush", grew>>10)
	}
	if len(got) != len(want) || len(got) != 40 {
		t.Fatalf("posted %d parts, want %d (40)", len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("part %d:\n%.200s\nwant\n%.200s", i, got[i], want[i])
		}
	}
}
