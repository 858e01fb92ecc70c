package gateway

import (
	"context"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"

	"vendorgate/gateway/backendapi"
	"vendorgate/gateway/limit"
	"vendorgate/gateway/readiness"
	"vendorgate/shared/readyz"
)

// pollInterval is the time between two rounds of pollBreakers.
const pollInterval = 250 * time.Millisecond

// poller runs the gateway's periodic work (pollBreakers) on a goroutine of
// its own, started by New (run), until Close stops it (close), once,
// waiting for the round under way to end.
type poller struct {
	once sync.Once
	stop chan struct{}
	done chan struct{}
}

// run calls round at once, then every interval until close.
func (p *poller) run(interval time.Duration, round func()) {
	defer close(p.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		round()
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
	}
}

// close stops the rounds, waits for the one under way to end and then
// calls last; only its first call does anything.
func (p *poller) close(last func()) {
	p.once.Do(func() {
		close(p.stop)
		<-p.done
		last()
	})
}

// pollBreakers, a round of the poller, keeps the breaker state gauge
// current: gobreaker moves open to half-open only when asked, so an idle
// breaker would read open forever. It keeps the readiness gauge (the full
// /readyz, nothing excluded) current too, for the alerts and the
// dashboard, and the node's scheduling lateness as the Redis limiter
// measures it, with the grace it gives a silent Redis; and it writes the
// access log's summaries when due.
func (g *Gateway) pollBreakers(checks []readyz.Check) {
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
	g.alog.summarize(g.plain, false)
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
