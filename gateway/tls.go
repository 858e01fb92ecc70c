package gateway

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"vendorgate/config"
	"vendorgate/gateway/connlimit"
	"vendorgate/gateway/edgetls"
	"vendorgate/shared/barelf"
	"vendorgate/shared/idleconn"
)

// edgeTLS is the public listener's TLS: the certificates in force, the
// configuration handshakes use, and the metrics SREs watch. Its zero value
// (certs nil) is plain HTTP.
type edgeTLS struct {
	certs         *edgetls.Store
	config        *tls.Config
	watchInterval time.Duration
	failures      [edgetls.NumReasons]prometheus.Counter // by edgetls.Reason
	expiry        *prometheus.GaugeVec
	expiryMu      sync.Mutex
	reloads       *prometheus.CounterVec
	// acme obtains and renews the certificates of tls.acme.domains; nil
	// without them.
	acme   *edgetls.ACME
	orders *prometheus.CounterVec
	// watchStop ends the file watcher; watchDone is closed when it has.
	watchStop, watchDone chan struct{}
	// budget bounds handshakes across all peers; overBudget counts those
	// that found no room within read_timeout.
	budget     *edgetls.Budget
	overBudget prometheus.Counter
}

// setupTLS reads the certificates (New refuses to start on a file that
// cannot be read or a key that does not match), registers the TLS metrics
// and starts the file watcher. An expired certificate is served, with a
// loud warning and the expiry gauge in the past: refusing it would turn a
// late renewal into an outage.
//
// A set that does not cover the host of an https public_base_url is
// served with an ERROR line (a restart takes any valid set; -check
// refuses it), and a renewal that drops that host or any DNS name of the
// set in force is refused.
func (g *Gateway) setupTLS(c config.TLS, listen, httpListen, publicBaseURL string, now func() time.Time) error {
	if !c.Enabled() {
		return nil
	}
	certs, err := edgetls.Load(c.Files(), now)
	if err != nil {
		return err
	}
	t := &g.tls
	t.certs = certs
	certs.Require(edgetls.Required(c, publicBaseURL)...)
	for _, n := range certs.Uncovered() {
		g.log.Error("tls certificate files do not cover public_base_url's host: clients asking for it are refused in the handshake",
			"public_base_url", publicBaseURL, "uncovered", n, "files", strings.Join(fileNames(c.Files()), ","))
	}
	if len(c.ACME.Domains) > 0 {
		tlsPort, httpPort := portOf(listen), portOf(httpListen)
		if t.acme, err = edgetls.NewACME(edgetls.ACMEOptions{Settings: c.ACME, TLSPort: tlsPort, HTTPPort: httpPort,
			OnOrder: g.onACMEOrder, OnCached: g.onACMECached}); err != nil {
			return err
		}
		certs.SetACME(t.acme)
		t.orders = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vendorgate_gateway_acme_orders_total",
			Help: "ACME certificate orders finished, by kind (obtain: a first certificate, renew) and result (ok, error)."},
			[]string{"kind", "result"})
		for _, k := range []string{"obtain", "renew"} {
			t.orders.WithLabelValues(k, "ok")
			t.orders.WithLabelValues(k, "error")
		}
		g.metrics.Registry.MustRegister(t.orders)
	}
	t.config, t.watchInterval = edgetls.Config(certs), c.WatchInterval
	failures := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vendorgate_gateway_tls_handshake_failures_total",
		Help: "TLS handshakes on the public listener that failed, by reason: version_or_cipher, unknown_sni, bad_certificate (the client refused ours), timeout (not done within read_timeout), not_tls, closed (the client left), other, proxy_header (a trusted proxy's PROXY header missing or malformed, with proxy_protocol)."},
		[]string{"reason"})
	for _, r := range edgetls.Reasons() {
		t.failures[r] = failures.WithLabelValues(r.String())
	}
	t.expiry = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "vendorgate_gateway_tls_certificate_expiry_timestamp_seconds",
		Help: "When each certificate served on the public listener expires (Unix time), by its file and the names it covers."},
		[]string{"cert_file", "names"})
	t.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vendorgate_gateway_tls_certificate_reloads_total",
		Help: "Reloads of the TLS certificate files (SIGHUP, or a change seen by the watcher), by result: ok (swapped in for new handshakes), error (refused: the certificate in force stays)."},
		[]string{"result"})
	t.reloads.WithLabelValues("ok")
	t.reloads.WithLabelValues("error")
	inProgress, perSecond := c.HandshakeBudget()
	if t.budget, err = edgetls.NewBudget(inProgress, perSecond, g.readTimeout/2); err != nil {
		return err
	}
	t.overBudget = prometheus.NewCounter(prometheus.CounterOpts{Name: "vendorgate_gateway_tls_handshakes_over_budget_total",
		Help: "TLS handshakes closed because tls.max_handshakes or tls.max_handshakes_per_second left no room for them within half of read_timeout."})
	inProgressGauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "vendorgate_gateway_tls_handshakes_in_progress",
		Help: "TLS handshakes in progress on the public listener, from the ClientHello to the handshake's end; at most tls.max_handshakes."},
		func() float64 { return float64(t.budget.InProgress()) })
	g.metrics.Registry.MustRegister(failures, t.expiry, t.reloads, t.overBudget, inProgressGauge)
	for _, in := range certs.Certificates() {
		if in.RSA {
			g.log.Warn("tls certificate has an RSA key: a handshake costs about 1.1 ms of CPU (ECDSA P-256: about 0.23 ms); prefer an ECDSA key on a gateway that takes many new connections",
				"cert_file", in.CertFile, "names", strings.Join(in.Names, ","))
		}
	}
	g.setExpiry(certs.Certificates())
	for _, in := range certs.Certificates() {
		if in.Expired(now()) {
			g.log.Error("TLS CERTIFICATE EXPIRED: served until renewed; clients refuse it", "cert_file", in.CertFile,
				"names", strings.Join(in.Names, ","), "not_after", in.NotAfter.UTC().Format(time.RFC3339))
		}
	}
	if t.watchInterval > 0 {
		t.watchStop, t.watchDone = make(chan struct{}), make(chan struct{})
		go g.watchCertificates()
	}
	return nil
}

// Certificates describes the certificates served on the public listener;
// none with plain HTTP.
func (g *Gateway) Certificates() []edgetls.Info {
	if g.tls.certs == nil {
		return nil
	}
	return g.tls.certs.Certificates()
}

// ReloadCertificates reads the certificate files again (SIGHUP) and swaps
// them in for new handshakes; established connections keep theirs. A file
// that cannot be read, a key that does not match, an expired certificate,
// or a set that drops a name in force (edgetls.Store.Reload) is refused
// and the certificates in force stay. Files whose
// content has not changed are not read again (edgetls.ErrUnchanged).
func (g *Gateway) ReloadCertificates() error {
	if g.tls.certs == nil {
		return nil
	}
	return g.reloadCertificates(g.tls.certs.Reload)
}

// reloadCertificates swaps the certificates with reload (the store's
// Reload or Poll), and logs and counts what came of it.
func (g *Gateway) reloadCertificates(reload func() ([]edgetls.Info, error)) error {
	infos, err := reload()
	switch {
	case errors.Is(err, edgetls.ErrUnchanged):
		return err
	case err != nil:
		g.tls.reloads.WithLabelValues("error").Inc()
		g.log.Error("tls certificate refused; the certificate in force stays", "err", err)
		return err
	}
	g.tls.reloads.WithLabelValues("ok").Inc()
	g.setExpiry(infos)
	for _, in := range infos {
		g.log.Info("tls certificate reloaded", "cert_file", in.CertFile, "names", strings.Join(in.Names, ","),
			"not_after", in.NotAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

// watchCertificates reloads the certificates whenever a file's content
// changes (a renewal written in place, a Kubernetes secret updated). A
// changed file that is refused is reported once, and only when it stays
// so for a second look (edgetls.Store.Poll): a pair written one file after
// the other is not refused in between.
func (g *Gateway) watchCertificates() {
	defer close(g.tls.watchDone)
	t := time.NewTicker(g.tls.watchInterval)
	defer t.Stop()
	for {
		select {
		case <-g.tls.watchStop:
			return
		case <-t.C:
			_ = g.reloadCertificates(g.tls.certs.Poll) // logged and counted there
		}
	}
}

// onACMEOrder logs and counts a finished ACME order, and updates the
// expiry gauge.
func (g *Gateway) onACMEOrder(domain string, renewal bool, err error) {
	kind := "obtain"
	if renewal {
		kind = "renew"
	}
	if err != nil {
		g.tls.orders.WithLabelValues(kind, "error").Inc()
		g.log.Error("acme certificate order failed; retried with backoff", "domain", domain, "kind", kind, "err", err)
		return
	}
	g.tls.orders.WithLabelValues(kind, "ok").Inc()
	g.log.Info("acme certificate obtained", "domain", domain, "kind", kind)
}

// onACMECached updates the expiry gauge when a managed certificate is
// taken into use (obtained, renewed, or loaded from storage at start).
func (g *Gateway) onACMECached(in edgetls.Info) {
	g.setExpiry(g.tls.certs.Certificates())
	g.log.Info("tls certificate in force", "cert_file", in.CertFile, "names", strings.Join(in.Names, ","),
		"not_after", in.NotAfter.UTC().Format(time.RFC3339))
}

// fileNames are the certificate files' names.
func fileNames(files []config.CertFiles) []string {
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = f.CertFile
	}
	return out
}

// TLSServed says how the public listener serves TLS, for the start line:
// "off" (plain HTTP); each certificate from files, its names, file and
// expiry; with ACME, "acme" and its domains, each with the expiry of its
// certificate or "no certificate yet".
func (g *Gateway) TLSServed() string {
	if g.tls.certs == nil {
		return "off"
	}
	var parts []string
	for _, in := range g.tls.certs.Certificates() {
		if in.CertFile == "acme" {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s (%s) expires %s", strings.Join(in.Names, ","), in.CertFile, in.NotAfter.UTC().Format(time.RFC3339)))
	}
	if a := g.tls.acme; a != nil {
		certs := a.Certificates()
		for _, d := range a.Domains() {
			state := "no certificate yet"
			for _, in := range certs {
				if slices.Contains(in.Names, d) {
					state = "expires " + in.NotAfter.UTC().Format(time.RFC3339)
				}
			}
			parts = append(parts, "acme "+d+" "+state)
		}
	}
	return strings.Join(parts, "; ")
}

// portOf is addr's port, 0 when addr is empty or has none.
func portOf(addr string) int {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(p)
	return n
}

// stopTLS ends the watcher and the ACME renewals; release calls it.
func (g *Gateway) stopTLS() {
	if g.tls.acme != nil {
		g.tls.acme.Close()
		g.tls.acme = nil
	}
	if g.tls.watchStop != nil {
		close(g.tls.watchStop)
		<-g.tls.watchDone
		g.tls.watchStop = nil
	}
}

func (g *Gateway) setExpiry(infos []edgetls.Info) {
	g.tls.expiryMu.Lock() // the watcher and ACME's events both set it
	defer g.tls.expiryMu.Unlock()
	g.tls.expiry.Reset()
	for _, in := range infos {
		g.tls.expiry.WithLabelValues(in.CertFile, strings.Join(in.Names, ",")).Set(float64(in.NotAfter.Unix()))
	}
}

// onHandshakeFailure counts a failed handshake; none is logged (a scanner
// would fill the log).
func (g *Gateway) onHandshakeFailure(r edgetls.Reason) { g.tls.failures[r].Inc() }

// publicListener wraps the public listener, in the order each guard needs:
// the per-peer bound at accept, before any handshake (under TLS a refused
// connection is closed unanswered: the client expects a handshake and
// cannot read a plaintext 429); the progress bound on the raw bytes
// (idleconn, which proxy.Forward's idleconn.Stream finds through the TLS
// connection); TLS; the bare-LF guard on the plaintext. Without TLS the
// order is the one plain HTTP always had, idleconn outermost. With
// proxy_protocol the PROXY header of a trusted proxy's connection is read
// by the per-peer bound at accept (connlimit.Options.Header), in a
// goroutine of the connection's own, never in the accept loop, and the
// bounds apply to the client it names (proxyprotocol.go).
func (g *Gateway) publicListener(pub net.Listener) (net.Listener, error) {
	o := connlimit.Options{Total: g.conns, PerPeer: g.maxConnsPerPeer, NewPerSecond: g.maxNewConnsPerPeer,
		Exempt: g.connExempt, Header: g.connHeader(), Refusal: g.connRefusal, OnRefuse: g.onConnRefused,
		Linger: refusalLinger, MaxRefusing: maxRefusing}
	if g.tls.certs != nil {
		o.Refusal = nil
	}
	var bounded net.Listener
	bounded, err := connlimit.NewListener(pub, o)
	if err != nil {
		return nil, err
	}
	if g.tls.certs != nil {
		raw := idleconn.NewListener(bounded, idleconn.Options{Idle: g.streamIdle})
		if g.tls.acme != nil {
			// Orders begin once the listener is there to answer the
			// CA's TLS-ALPN-01 validation.
			if err := g.tls.acme.Manage(); err != nil {
				g.log.Error("acme: certificates not managed", "err", err)
			}
		}
		return edgetls.NewListener(&keylessListener{Listener: raw, idle: g.keylessIdle}, g.tls.config, g.onHandshakeFailure).WithBudget(g.tls.budget, g.tls.overBudget.Inc), nil
	}
	return &keylessListener{Listener: idleconn.NewListener(barelf.NewListener(bounded), idleconn.Options{Idle: g.streamIdle}), idle: g.keylessIdle}, nil
}
