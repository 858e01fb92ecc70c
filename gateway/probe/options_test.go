package probe

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"vendorgate/config"
)

// testOptions are valid options for a Prober of backends (no Redis): the
// limiter's default timeout for a PING (config holds it), a second for a
// backend probe and between probes, and a logger that writes nowhere.
func testOptions(backends ...string) Options {
	return Options{RedisTimeout: config.DefaultGateway().Redis.Timeout, Backends: backends, InternalToken: token,
		BackendTimeout: time.Second, Interval: time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// TestNewRefusesZeros: the prober fills in no default of its own: each
// duration it needs, left zero, is refused with an error that names it.
func TestNewRefusesZeros(t *testing.T) {
	good := testOptions()
	p, err := New(good)
	if err != nil {
		t.Fatalf("valid options refused: %v", err)
	}
	p.Close()
	for name, zero := range map[string]func(o *Options){
		"redis timeout":   func(o *Options) { o.RedisTimeout = 0 },
		"backend timeout": func(o *Options) { o.BackendTimeout = 0 },
		"interval":        func(o *Options) { o.Interval = 0 },
	} {
		o := good
		zero(&o)
		p, err := New(o)
		switch {
		case err == nil:
			p.Close()
			t.Errorf("%s 0: accepted", name)
		case !strings.Contains(err.Error(), name):
			t.Errorf("%s 0: %q does not name it", name, err)
		}
	}
}
