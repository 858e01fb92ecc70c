package vendors

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"vendorgate/backend/store/sqlite"
	"vendorgate/shared/apierr"
	"vendorgate/shared/apikey"
)

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestRotationRevokesAtOverlapEnd: during a rotation's overlap both keys
// resolve working; from its end the old key resolves revoked even before
// RevokeDue has run (a gateway whose publish was lost learns it when its
// cached entry expires), RevokeDue then revokes it once, and a second
// rotation of the old key or one with a negative overlap is refused.
func TestRotationRevokesAtOverlapEnd(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	signer, err := apikey.NewSigner([]string{"rotate-test-key-signing-secret-0123456789"})
	if err != nil {
		t.Fatal(err)
	}
	c := &clock{t: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)}
	s, err := New(Options{Store: st, Prefixes: apikey.DefaultPrefixes(), Signer: signer, KeyLifetime: 90 * 24 * time.Hour,
		Now: c.now, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	v, err := s.Create(ctx, "Rotate Co", "live", nil)
	if err != nil {
		t.Fatal(err)
	}
	oldRaw, old, err := s.IssueKey(ctx, v.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	newRaw, o, n, _, err := s.RotateKey(ctx, old.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if o.ReplacedBy != n.ID || n.RotatedFrom != old.ID || o.RevokeAt == nil || !o.RevokeAt.Equal(c.now().Add(time.Hour)) {
		t.Fatalf("rotation recorded old %+v new %+v", o, n)
	}
	resolve := func(raw string) bool {
		t.Helper()
		r, err := s.Resolve(ctx, apikey.Hash(raw))
		if err != nil {
			t.Fatal(err)
		}
		return r.RevokedAt != nil
	}
	if resolve(oldRaw) || resolve(newRaw) {
		t.Fatal("a key resolves revoked during the overlap")
	}
	if n, err := s.RevokeDue(ctx, nil); err != nil || n != 0 {
		t.Fatalf("RevokeDue during the overlap: %d, %v; want nothing revoked", n, err)
	}
	c.add(time.Hour)
	if !resolve(oldRaw) {
		t.Error("the old key resolves working at the end of its overlap, before RevokeDue ran")
	}
	if resolve(newRaw) {
		t.Error("the new key resolves revoked")
	}
	if n, err := s.RevokeDue(ctx, nil); err != nil || n != 1 {
		t.Fatalf("RevokeDue at the end of the overlap: %d, %v; want 1 revoked", n, err)
	}
	if n, err := s.RevokeDue(ctx, nil); err != nil || n != 0 {
		t.Fatalf("RevokeDue again: %d, %v; want nothing more", n, err)
	}
	var ae *apierr.Error
	if _, _, _, _, err := s.RotateKey(ctx, old.ID, time.Hour); !errors.As(err, &ae) || ae.Code != apierr.RequestFailed {
		t.Errorf("rotating a revoked key: %v, want request_failed", err)
	}
	if _, _, _, _, err := s.RotateKey(ctx, n.ID, -time.Second); !errors.As(err, &ae) || ae.Code != apierr.ValidationError {
		t.Errorf("a negative overlap: %v, want validation_error", err)
	}
	if _, _, _, _, err := s.RotateKey(ctx, "00000000-0000-4000-8000-000000000000", time.Hour); !errors.As(err, &ae) || ae.Code != apierr.NotFound {
		t.Errorf("rotating an unknown key: %v, want not_found", err)
	}
}
