package backendapi

import (
	"strings"
	"testing"
	"time"

	"vendorgate/config"
)

// testOptions are valid options for a Client of backends: the breaker
// settings' defaults (config holds them), a lookup timeout and pool of the
// tests' own.
func testOptions(backends ...string) Options {
	d := config.DefaultGateway().Proxy
	return Options{Backends: backends, InternalToken: "tok", Timeout: 2 * time.Second, MaxConns: 8,
		BreakerOpenFor: d.BreakerOpenFor, BreakerFailures: d.BreakerFailures}
}

// TestNewRefusesZeros: the client fills in no default of its own: each
// duration and count it needs, left zero, is refused with an error that
// names it.
func TestNewRefusesZeros(t *testing.T) {
	good := testOptions("http://127.0.0.1:1")
	if _, err := New(good); err != nil {
		t.Fatalf("valid options refused: %v", err)
	}
	for name, zero := range map[string]func(o *Options){
		"timeout":          func(o *Options) { o.Timeout = 0 },
		"max conns":        func(o *Options) { o.MaxConns = 0 },
		"breaker open for": func(o *Options) { o.BreakerOpenFor = 0 },
		"breaker failures": func(o *Options) { o.BreakerFailures = 0 },
	} {
		o := good
		zero(&o)
		_, err := New(o)
		switch {
		case err == nil:
			t.Errorf("%s 0: accepted", name)
		case !strings.Contains(err.Error(), name):
			t.Errorf("%s 0: %q does not name it", name, err)
		}
	}
}
