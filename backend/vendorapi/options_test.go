package vendorapi

import (
	"strings"
	"testing"
)

// TestNewRefusesZeros: the vendor API fills in no default of its own: the
// body bound, left zero (or negative), is refused with an error that
// names it; the caller passes config's max_body_bytes.
func TestNewRefusesZeros(t *testing.T) {
	if _, err := New(Options{MaxBodyBytes: 512}); err != nil {
		t.Fatalf("valid options refused: %v", err)
	}
	for name, o := range map[string]Options{
		"max body bytes":          {MaxBodyBytes: 0},
		"max body bytes negative": {MaxBodyBytes: -1},
	} {
		_, err := New(o)
		switch {
		case err == nil:
			t.Errorf("%s: accepted", name)
		case !strings.Contains(err.Error(), "max body bytes"):
			t.Errorf("%s: %q does not name it", name, err)
		}
	}
}
