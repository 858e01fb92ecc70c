package breaker

import (
	"errors"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
)

// TestWindowJudgesRoundTrips: with a Window, a few failures among many
// successes open nothing; Failures failures in a row open the breaker; so
// do Failures failures making FailureRatio of the window; excluded errors
// count for neither.
func TestWindowJudgesRoundTrips(t *testing.T) {
	errFail, errMine := errors.New("redis failed"), errors.New("the node read late")
	cases := []struct {
		name     string
		outcomes []error
		open     bool
	}{
		{"two failures among successes", []error{nil, nil, errFail, nil, nil, errFail, nil, nil}, false},
		{"three in a row after successes", []error{nil, nil, nil, nil, nil, nil, errFail, errFail, errFail}, true},
		{"three of five", []error{errFail, nil, errFail, nil, errFail}, true},
		{"three of seven", []error{errFail, nil, nil, errFail, nil, nil, errFail}, false},
		{"excluded between failures", []error{errFail, errMine, errFail, errMine, nil, errMine}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var tripped gobreaker.Counts
			cb := mustNewTwoStep[struct{}](t, Settings{Name: "t", Failures: 3, Window: time.Minute, FailureRatio: 0.5, OpenFor: time.Minute,
				OnTrip:   func(counts gobreaker.Counts) { tripped = counts },
				Excluded: func(err error) bool { return errors.Is(err, errMine) }})
			for i, err := range c.outcomes {
				done, aerr := cb.Allow()
				if aerr != nil {
					t.Fatalf("outcome %d: %v", i, aerr)
				}
				done(err)
			}
			if open := cb.State() == gobreaker.StateOpen; open != c.open {
				t.Fatalf("open %v, want %v (counts %+v)", open, c.open, cb.Counts())
			}
			if c.open && tripped.TotalFailures < 3 {
				t.Fatalf("OnTrip told %+v", tripped)
			}
		})
	}
}
