// Package readiness is the gateway's /readyz checks (shared/readyz runs
// them): draining, tls (with ACME), redis (with a Redis limiter) and
// backend, each from the parts that know (the prober's last verdicts, the
// breakers' states). The gateway builds them once with Checks and serves
// them on the admin listener; its poller runs them for the ready gauge.
package readiness

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sony/gobreaker/v2"

	"vendorgate/gateway/backendapi"
	"vendorgate/gateway/limit"
	"vendorgate/gateway/probe"
	"vendorgate/gateway/proxy"
	"vendorgate/shared/readyz"
)

// The names of /readyz's checks (?exclude=NAME leaves one out).
const (
	CheckDraining = "draining"
	CheckTLS      = "tls"
	CheckRedis    = "redis"
	CheckBackend  = "backend"
)

// Sources are what the checks read.
type Sources struct {
	// Draining reports whether the gateway is shutting down.
	Draining func() bool
	// ACMEMissing lists the ACME domains with no certificate yet; nil
	// without ACME.
	ACMEMissing func() []string
	// Limiter is the Redis limiter; nil with the in-process one.
	Limiter *limit.Redis
	Probe   *probe.Prober
	Proxy   *proxy.Proxy
	Lookup  *backendapi.Client
}

// Checks are /readyz's checks: draining (SIGTERM received), tls (with
// ACME: a certificate covers every domain of tls.acme.domains), redis
// (with a Redis limiter: the prober's PING answered and the limiter's
// breaker not open), backend (at least one backend answers the prober and
// its breaker is not open, and the key-lookup breaker is not open). Redis
// and the backends are shared by every replica, so a load balancer's probe
// excludes them (docs/operating.md, "Readiness").
func Checks(s Sources) ([]readyz.Check, error) {
	if s.Draining == nil || s.Probe == nil || s.Proxy == nil || s.Lookup == nil {
		return nil, errors.New("readiness: draining, the prober, the proxy and the key lookup are required")
	}
	checks := []readyz.Check{{Name: CheckDraining, Run: func(context.Context) error {
		if s.Draining() {
			return errors.New("shutting down")
		}
		return nil
	}}}
	if s.ACMEMissing != nil {
		// Not excluded by a balancer's probe: a replica with no
		// certificate for a domain fails every handshake for it, and
		// another replica may have one.
		checks = append(checks, readyz.Check{Name: CheckTLS, Run: func(context.Context) error {
			if missing := s.ACMEMissing(); len(missing) > 0 {
				return fmt.Errorf("no certificate yet for %s (ACME order pending or failing: see the log's acme lines)", strings.Join(missing, ", "))
			}
			return nil
		}})
	}
	if s.Limiter != nil {
		checks = append(checks, readyz.Check{Name: CheckRedis, Run: func(context.Context) error {
			if err := s.Probe.Redis(); err != nil {
				return err
			}
			if s.Limiter.State() == gobreaker.StateOpen {
				return errors.New("limiter breaker open")
			}
			return nil
		}})
	}
	return append(checks, readyz.Check{Name: CheckBackend, Run: s.checkBackends}), nil
}

// checkBackends is ready while any backend is: a gateway with one backend of
// two still serves every request. The ones down are the reason shown.
func (s Sources) checkBackends(context.Context) error {
	var down []string
	i, total := 0, 0
	s.Proxy.Breakers(func(name string, st gobreaker.State) {
		switch err := s.Probe.Backend(i); {
		case err != nil:
			down = append(down, err.Error())
		case st == gobreaker.StateOpen:
			down = append(down, strings.TrimPrefix(name, "backend:")+": breaker open")
		}
		i++
		total++
	})
	if s.Lookup.State() == gobreaker.StateOpen {
		return errors.New(strings.Join(append([]string{"key lookup breaker open"}, down...), "; "))
	}
	switch {
	case len(down) == total:
		return errors.New(strings.Join(down, "; "))
	case len(down) > 0:
		return readyz.Degraded(errors.New(strings.Join(down, "; ")))
	}
	return nil
}
