package breaker

import (
	"errors"
	"fmt"
	"testing"

	"github.com/sony/gobreaker/v2"
	"github.com/valyala/fasthttp"
)

// A call that failed before the remote side was asked anything leaves the
// breaker closed however often it happens; a failure of the remote side
// opens it.
func TestExcludedErrorsNeverOpen(t *testing.T) {
	for _, c := range []struct {
		err   error
		opens bool
	}{
		{fasthttp.ErrNoFreeConns, false},
		{fasthttp.ErrHostClientRedirectToDifferentScheme, false},
		{fasthttp.ErrConnectionClosed, true},
		{fasthttp.ErrTimeout, true},
		{errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), true},
	} {
		cb := New[struct{}](Settings{Name: "t", Failures: 1})
		for range 5 {
			_, _ = cb.Execute(func() (struct{}, error) { return struct{}{}, fmt.Errorf("backend b: %w", c.err) })
		}
		if open := cb.State() == gobreaker.StateOpen; open != c.opens {
			t.Errorf("%v: open %v, want %v", c.err, open, c.opens)
		}
	}
}
