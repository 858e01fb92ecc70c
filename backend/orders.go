package backend

import (
	"time"

	"vendorgate/backend/orders"
	"vendorgate/backend/periodic"
	"vendorgate/backend/reports"
	"vendorgate/backend/sandbox"
	"vendorgate/backend/sweeper"
)

// background is the sandbox provider, the deadline sweeper and the
// revocations at the end of key rotations' overlaps.
type background struct {
	runner  *sandbox.Runner
	sweeper *sweeper.Sweeper
	// revoker revokes keys whose rotation overlap has ended, every
	// sweep_interval.
	revoker *periodic.Loop
	// auditSweep deletes audit records older than audit_retention: once
	// at start, then every auditSweepInterval.
	auditSweep *periodic.Loop
	// exporter sends billable services to the billing endpoint, every
	// billing_export.interval; nil when billing_export.url is empty.
	exporter *periodic.Loop
}

// auditSweepInterval is how often audit records past their retention are
// deleted.
const auditSweepInterval = time.Hour

func (g *background) start() {
	g.runner.Start()
	g.sweeper.Start()
	g.revoker.Start()
	g.auditSweep.Run()
	g.auditSweep.Start()
	if g.exporter != nil {
		g.exporter.Start()
	}
}

func (g *background) stop() {
	g.runner.Close()
	g.sweeper.Close()
	g.revoker.Close()
	g.auditSweep.Close()
	if g.exporter != nil {
		g.exporter.Close()
	}
}

// buildOrders builds the order domain and its background work.
func (b *Backend) buildOrders() (*orders.Service, *background, error) {
	c := b.cfg
	rs, err := reports.New(c.ReportsDir)
	if err != nil {
		return nil, nil, err
	}
	svc, err := orders.New(orders.Options{Store: b.store, Reports: rs, PublicBaseURL: c.PublicBaseURL,
		Deadline: c.OrderDeadline, SandboxDelay: c.SandboxDelay, MVRUnavailableStates: c.MVRUnavailableStates,
		Observer: b.metrics, Now: b.o.Now, Logger: b.log})
	if err != nil {
		return nil, nil, err
	}
	tick := c.SandboxDelay / 10
	tick = max(10*time.Millisecond, min(tick, 250*time.Millisecond))
	runner, err := sandbox.NewRunner(sandbox.RunnerOptions{Orders: svc, Tick: tick, Logger: b.log})
	if err != nil {
		return nil, nil, err
	}
	sw, err := sweeper.New(sweeper.Options{Orders: svc, Interval: c.SweepInterval, Observer: b.metrics, Logger: b.log})
	if err != nil {
		return nil, nil, err
	}
	return svc, &background{runner: runner, sweeper: sw}, nil
}
