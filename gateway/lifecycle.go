package gateway

import (
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/valyala/fasthttp"

	"vendorgate/config"
	"vendorgate/gateway/edge"
	"vendorgate/gateway/window"
)

// Serve serves the public API on pub and the admin endpoints on adm until
// Shutdown. It returns the first serving error.
func (g *Gateway) Serve(pub, adm net.Listener) error { return g.edge.Serve(pub, adm) }

// ServePlain serves the plain-HTTP listener (http_listen) on ln until
// Shutdown; the same per-peer connection bounds and bare-LF guard as the
// public listener. Without http_listen it closes ln and returns an error.
func (g *Gateway) ServePlain(ln net.Listener) error { return g.edge.ServePlain(ln) }

// Shutdown turns /readyz unready, stops accepting, waits for in-flight
// requests until grace has passed, then closes Redis clients, the
// subscriber and the backend pools.
func (g *Gateway) Shutdown(delay, grace time.Duration) error {
	g.draining.Store(true)
	// Stay in rotation for delay while /readyz says unready, so that a load
	// balancer stops sending before the listener closes; answers in that time
	// ask clients to close their keep-alive connections (see finish).
	if delay > 0 {
		time.Sleep(delay)
	}
	err := g.edge.Shutdown(grace)
	g.Close()
	return err
}

// Close releases what New started; Shutdown calls it.
func (g *Gateway) Close() {
	g.poll.close(func() {
		g.alog.summarize(g.plain, true) // the refusals counted since the last summary
		g.release()
	})
}

// release stops and closes what New built, in order (the usage recorder's
// last flush before the clients close); it skips what New did not get to,
// so that a New failing halfway releases what it had started.
func (g *Gateway) release() {
	if g.edge != nil {
		g.edge.Close() // the certificate watcher and ACME renewals
	}
	if g.probe != nil {
		g.probe.Close()
	}
	if g.usage != nil {
		g.usage.Close()
	}
	if g.subscriber != nil {
		_ = g.subscriber.Close()
	}
	if g.auth != nil {
		g.auth.Close()
	}
	g.stores.Close() // the Redis limiter, the slots, then the clients
	if g.proxy != nil {
		g.proxy.Close()
	}
}

// Reload validates c, a complete new configuration, and swaps in its
// reloadable part: the limits (shadow twins included) and overrides, the
// failed-key thresholds, the trusted proxies, and the documentation
// rendered from them; c.Version names it. Any other setting takes effect
// only on a restart. Requests in flight finish under the settings they
// started with; a refused c leaves the old settings. It logs each setting
// that changed with its old and new values (a secret without them): those
// applied, and those that wait for a restart.
func (g *Gateway) Reload(c *config.Gateway) error {
	sn, err := compileValid(c, g.snap.Load())
	if err != nil {
		g.metrics.ConfigReloads.WithLabelValues("error").Inc()
		return fmt.Errorf("reload: %w", err)
	}
	sn.countDecisions(g.metrics)
	if !slices.Equal(g.snap.Load().names, sn.names) {
		// Usage counts by row index until a flush names them: what the
		// old table counted is stored under its names first.
		g.usage.Flush()
	}
	old := g.snap.Swap(sn)
	if g.stores.Redis != nil {
		// Leases taken under the old limits go back; the new lease
		// settings apply from the next call.
		if err := g.stores.Redis.SetLeases(c.Redis.LeaseMax, c.Redis.LeaseTTL); err != nil {
			// config's validation refuses such settings first
			g.log.Error("lease settings not reloaded; the previous stay", "err", err)
		}
		if w, ok := g.stores.Windows.(*window.Redis); ok {
			w.SetLeases(c.Redis.LeaseMax, c.Redis.LeaseTTL) // the quotas' leases
		}
	}
	g.metrics.ConfigReloads.WithLabelValues("ok").Inc()
	if err := g.renderDocs(sn); err != nil {
		g.log.Error("documentation not re-rendered; the previous page stays", "err", err)
	}
	if old.version != sn.version {
		g.metrics.ConfigInfo.DeleteLabelValues(old.version)
	}
	g.metrics.ConfigInfo.WithLabelValues(sn.version).Set(1)
	applied, restart, err := changes(old.cfg, sn.cfg)
	if err != nil {
		g.log.Warn("the settings changed by the reload could not be listed", "err", err)
	}
	g.log.Info("configuration reloaded", "config_version", sn.version, "changed", applied, "restart_needed", restart)
	return nil
}

// ReloadFailed counts a reload refused before it reached Reload (the file
// did not load).
func (g *Gateway) ReloadFailed() { g.metrics.ConfigReloads.WithLabelValues("error").Inc() }

// Certificates describes the certificates served on the public listener;
// none with plain HTTP.
func (g *Gateway) Certificates() []edge.Info { return g.edge.Certificates() }

// ReloadCertificates reads the certificate files again (SIGHUP) and swaps
// them in for new handshakes (edge.Server.ReloadCertificates); files whose
// content has not changed are not read again (ErrCertificatesUnchanged).
func (g *Gateway) ReloadCertificates() error { return g.edge.ReloadCertificates() }

// ErrCertificatesUnchanged is ReloadCertificates' error when no file
// changed.
var ErrCertificatesUnchanged = edge.ErrUnchanged

// TLSServed says how the public listener serves TLS, for the start line
// (edge.Server.TLSServed).
func (g *Gateway) TLSServed() string { return g.edge.TLSServed() }

// Handler is the public handler, for benchmarks and tests that drive it
// without a listener.
func (g *Gateway) Handler() fasthttp.RequestHandler { return g.serve }
