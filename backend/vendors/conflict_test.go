package vendors

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"vendorgate/backend/store/sqlite"
	"vendorgate/shared/apierr"
	"vendorgate/shared/apikey"
)

// A transition that is not allowed is request_failed with no HTTP status:
// the domain names the outcome, the admin API chooses the status (409).
func TestConflictCarriesNoStatus(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	signer, err := apikey.NewSigner([]string{"conflict-test-key-signing-secret-0123456789"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Store: st, Prefixes: apikey.DefaultPrefixes(), Signer: signer, KeyLifetime: 90 * 24 * time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	v, err := s.Create(ctx, "Conflict Co", "sandbox", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = s.SetStatus(ctx, v.ID, "reinstate") // pending cannot be reinstated
	var ae *apierr.Error
	if !errors.As(err, &ae) || ae.Code != apierr.RequestFailed {
		t.Fatalf("reinstate a pending vendor: %v, want request_failed", err)
	}
	if ae.HTTPStatus != 0 {
		t.Errorf("the domain set HTTP status %d; the HTTP layer chooses it", ae.HTTPStatus)
	}
}
