package gateway

import (
	"context"
	"time"

	"github.com/sony/gobreaker/v2"

	"vendorgate/gateway/backendapi"
	"vendorgate/gateway/limit"
	"vendorgate/gateway/readiness"
	"vendorgate/shared/readyz"
)

// pollBreakers keeps the breaker state gauge current: gobreaker moves open
// to half-open only when asked, so an idle breaker would read open forever.
// It keeps the readiness gauge (the full /readyz, nothing excluded) current
// too, for the alerts and the dashboard, and the node's scheduling lateness
// as the Redis limiter measures it, with the grace it gives a silent Redis.
func (g *Gateway) pollBreakers(checks []readyz.Check) {
	defer close(g.pollDone)
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		g.eachBreaker(func(name string, s gobreaker.State) {
			g.metrics.BreakerState.WithLabelValues(name).Set(float64(s))
		})
		if g.stores.Redis != nil {
			g.metrics.NodeSchedLateness.Set(g.stores.Redis.Lateness().Seconds())
			g.metrics.RedisSilenceGrace.Set(g.stores.Redis.Grace().Seconds())
		}
		for _, r := range readyz.Run(context.Background(), checks, readyz.Query{}).Results {
			passing := 0.0
			if r.Status == readyz.StatusOK {
				passing = 1
			}
			g.metrics.Ready.WithLabelValues(r.Name).Set(passing)
		}
		if g.refusals.Due(g.summaryEvery) {
			g.refusals.Flush(g.log)
		}
		g.plain.FlushWarnings(false, g.summaryEvery)
		select {
		case <-g.stopPoll:
			return
		case <-t.C:
		}
	}
}

func (g *Gateway) eachBreaker(fn func(name string, s gobreaker.State)) {
	if g.stores.Redis != nil {
		fn(limit.BreakerName, g.stores.Redis.State())
	}
	fn(backendapi.BreakerName, g.lookup.State())
	g.proxy.Breakers(fn)
}

// readyChecks are /readyz's checks (package readiness), read from the
// gateway's parts. The edge is built after them (its admin listener serves
// them): the tls check asks it when run.
func (g *Gateway) readyChecks() ([]readyz.Check, error) {
	s := readiness.Sources{Draining: g.draining.Load, Limiter: g.stores.Redis, Probe: g.probe, Proxy: g.proxy, Lookup: g.lookup}
	if len(g.snap.Load().cfg.TLS.ACME.Domains) > 0 {
		s.ACMEMissing = func() []string {
			missing, _ := g.edge.ACMEMissing()
			return missing
		}
	}
	return readiness.Checks(s)
}
