package breaker

import (
	"strings"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
)

// mustNew is New for a test: settings it refuses fail the test.
func mustNew[T any](t *testing.T, s Settings) *gobreaker.CircuitBreaker[T] {
	t.Helper()
	cb, err := New[T](s)
	if err != nil {
		t.Fatal(err)
	}
	return cb
}

// mustNewTwoStep is NewTwoStep for a test.
func mustNewTwoStep[T any](t *testing.T, s Settings) *gobreaker.TwoStepCircuitBreaker[T] {
	t.Helper()
	cb, err := NewTwoStep[T](s)
	if err != nil {
		t.Fatal(err)
	}
	return cb
}

// TestNewRefusesZeros: the breaker fills in no default of its own (nor
// lets gobreaker fill in its 60s open period): each count, duration and
// share it uses, left zero or out of range, is refused by New and
// NewTwoStep with an error that names it. Its callers pass config's
// proxy.* and redis.breaker_* settings.
func TestNewRefusesZeros(t *testing.T) {
	plain := Settings{Name: "t", Failures: 3, OpenFor: time.Second}
	windowed := plain
	windowed.Window, windowed.FailureRatio = time.Second, 0.5
	for _, good := range []Settings{plain, windowed} {
		if _, err := New[struct{}](good); err != nil {
			t.Fatalf("valid settings %+v refused: %v", good, err)
		}
		if _, err := NewTwoStep[struct{}](good); err != nil {
			t.Fatalf("valid settings %+v refused by NewTwoStep: %v", good, err)
		}
	}
	for _, c := range []struct {
		label, name string
		base        Settings
		bad         func(s *Settings)
	}{
		{"failures 0", "failures", plain, func(s *Settings) { s.Failures = 0 }},
		{"failures -1", "failures", plain, func(s *Settings) { s.Failures = -1 }},
		{"open for 0", "open for", plain, func(s *Settings) { s.OpenFor = 0 }},
		{"window -1s", "window", plain, func(s *Settings) { s.Window = -time.Second }},
		{"failure ratio 0", "failure ratio", windowed, func(s *Settings) { s.FailureRatio = 0 }},
		{"failure ratio 1.5", "failure ratio", windowed, func(s *Settings) { s.FailureRatio = 1.5 }},
	} {
		s := c.base
		c.bad(&s)
		_, err := New[struct{}](s)
		_, err2 := NewTwoStep[struct{}](s)
		for which, err := range map[string]error{"New": err, "NewTwoStep": err2} {
			switch {
			case err == nil:
				t.Errorf("%s: %s accepted", c.label, which)
			case !strings.Contains(err.Error(), c.name):
				t.Errorf("%s: %s: %q does not name %s", c.label, which, err, c.name)
			}
		}
	}
}
