package gateway

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sony/gobreaker/v2"

	"vendorgate/gateway/backendapi"
	"vendorgate/gateway/limit"
	"vendorgate/shared/readyz"
)

// pollBreakers keeps the breaker state gauge current: gobreaker moves open
// to half-open only when asked, so an idle breaker would read open forever.
// It keeps the readiness gauge (the full /readyz, nothing excluded) current
// too, for the alerts and the dashboard, and the node's scheduling lateness
// as the Redis limiter measures it, with the grace it gives a silent Redis.
func (g *Gateway) pollBreakers() {
	defer close(g.pollDone)
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	checks := g.readyChecks()
	for {
		g.eachBreaker(func(name string, s gobreaker.State) {
			g.metrics.BreakerState.WithLabelValues(name).Set(float64(s))
		})
		if g.redisLim != nil {
			g.metrics.NodeSchedLateness.Set(g.redisLim.Lateness().Seconds())
			g.metrics.RedisSilenceGrace.Set(g.redisLim.Grace().Seconds())
		}
		for _, r := range readyz.Run(context.Background(), checks, readyz.Query{}).Results {
			passing := 0.0
			if r.Status == readyz.StatusOK {
				passing = 1
			}
			g.metrics.Ready.WithLabelValues(r.Name).Set(passing)
		}
		if g.refusals.due(g.summaryEvery) {
			g.refusals.flush(g.log)
		}
		g.flushPlainWarnings(false)
		select {
		case <-g.stopPoll:
			return
		case <-t.C:
		}
	}
}

func (g *Gateway) eachBreaker(fn func(name string, s gobreaker.State)) {
	if g.redisLim != nil {
		fn(limit.BreakerName, g.redisLim.State())
	}
	fn(backendapi.BreakerName, g.lookup.State())
	g.proxy.Breakers(fn)
}

// The names of /readyz's checks (?exclude=NAME leaves one out).
const (
	checkDraining = "draining"
	checkTLS      = "tls"
	checkRedis    = "redis"
	checkBackend  = "backend"
)

// readyChecks are /readyz's checks: draining (SIGTERM received), tls
// (with ACME: a certificate covers every domain of tls.acme.domains), redis
// (with a Redis limiter: the prober's PING answered and the limiter's
// breaker not open), backend (at least one backend answers the prober and
// its breaker is not open, and the key-lookup breaker is not open). Redis
// and the backends are shared by every replica, so a load balancer's probe
// excludes them (docs/operating.md, "Readiness").
func (g *Gateway) readyChecks() []readyz.Check {
	checks := []readyz.Check{{Name: checkDraining, Run: func(context.Context) error {
		if g.draining.Load() {
			return errors.New("shutting down")
		}
		return nil
	}}}
	if len(g.snap.Load().cfg.TLS.ACME.Domains) > 0 {
		// Not excluded by a balancer's probe: a replica with no
		// certificate for a domain fails every handshake for it, and
		// another replica may have one.
		checks = append(checks, readyz.Check{Name: checkTLS, Run: func(context.Context) error {
			if missing, _ := g.edge.ACMEMissing(); len(missing) > 0 {
				return fmt.Errorf("no certificate yet for %s (ACME order pending or failing: see the log's acme lines)", strings.Join(missing, ", "))
			}
			return nil
		}})
	}
	if g.redisLim != nil {
		checks = append(checks, readyz.Check{Name: checkRedis, Run: func(context.Context) error {
			if err := g.probe.Redis(); err != nil {
				return err
			}
			if g.redisLim.State() == gobreaker.StateOpen {
				return errors.New("limiter breaker open")
			}
			return nil
		}})
	}
	return append(checks, readyz.Check{Name: checkBackend, Run: g.checkBackends})
}

// checkBackends is ready while any backend is: a gateway with one backend of
// two still serves every request. The ones down are the reason shown.
func (g *Gateway) checkBackends(context.Context) error {
	var down []string
	i, total := 0, 0
	g.proxy.Breakers(func(name string, s gobreaker.State) {
		switch err := g.probe.Backend(i); {
		case err != nil:
			down = append(down, err.Error())
		case s == gobreaker.StateOpen:
			down = append(down, strings.TrimPrefix(name, "backend:")+": breaker open")
		}
		i++
		total++
	})
	if g.lookup.State() == gobreaker.StateOpen {
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
