package proxy

import (
	"strings"
	"testing"
	"time"

	"vendorgate/config"
)

// testOptions are valid options for a Proxy of backends: the settings'
// defaults (config holds them) and the gateway's connection wait.
func testOptions(backends ...string) Options {
	d := config.DefaultGateway().Proxy
	return Options{Backends: backends, InternalToken: "token", Timeout: d.Timeout, StreamIdleTimeout: d.StreamIdleTimeout,
		MaxConns: d.MaxConns, StreamMaxConns: d.StreamMaxConns, MaxConnWait: 100 * time.Millisecond,
		BreakerOpenFor: d.BreakerOpenFor, BreakerFailures: d.BreakerFailures,
		MinRate: MinRate{Bytes: d.StreamMinRate, Window: d.StreamMinRateWindow, Grace: d.StreamMinRateGrace}}
}

// TestNewRefusesZeros: the proxy fills in no default of its own (config
// holds them): each duration and count it needs, left zero, is refused
// with an error that names it.
func TestNewRefusesZeros(t *testing.T) {
	good := testOptions("http://127.0.0.1:1")
	p, err := New(good)
	if err != nil {
		t.Fatalf("valid options refused: %v", err)
	}
	p.Close()
	for name, zero := range map[string]func(o *Options){
		"timeout":             func(o *Options) { o.Timeout = 0 },
		"stream idle timeout": func(o *Options) { o.StreamIdleTimeout = 0 },
		"max conns":           func(o *Options) { o.MaxConns = 0 },
		"stream max conns":    func(o *Options) { o.StreamMaxConns = 0 },
		"min rate window":     func(o *Options) { o.MinRate.Window = 0 },
		"max conn wait":       func(o *Options) { o.MaxConnWait = 0 },
		"breaker open for":    func(o *Options) { o.BreakerOpenFor = 0 },
		"breaker failures":    func(o *Options) { o.BreakerFailures = 0 },
	} {
		o := good
		zero(&o)
		p, err := New(o)
		if err == nil {
			p.Close()
			t.Errorf("%s 0: accepted", name)
			continue
		}
		if !strings.Contains(err.Error(), name) {
			t.Errorf("%s 0: %q does not name it", name, err)
		}
	}
	o := good
	o.MinRate = MinRate{}
	if p, err := New(o); err != nil {
		t.Errorf("no minimum rate (off) refused: %v", err)
	} else {
		p.Close()
	}
}
