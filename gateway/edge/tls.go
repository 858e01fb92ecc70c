package edge

import (
	"bytes"
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

	"github.com/valyala/fasthttp"

	"vendorgate/config"
)

// edgeTLS is the public listener's TLS: the certificates in force, the
// configuration handshakes use, and the metrics SREs watch. Its zero value
// (certs nil) is plain HTTP.
type edgeTLS struct {
	certs         *Store
	config        *tls.Config
	watchInterval time.Duration
	failures      [NumReasons]prometheus.Counter // by Reason
	expiry        *prometheus.GaugeVec
	expiryMu      sync.Mutex
	reloads       *prometheus.CounterVec
	// acme obtains and renews the certificates of tls.acme.domains; nil
	// without them.
	acme   *ACME
	orders *prometheus.CounterVec
	// watchStop ends the file watcher; watchDone is closed when it has.
	watchStop, watchDone chan struct{}
	// budget bounds handshakes across all peers; overBudget counts those
	// that found no room within read_timeout.
	budget     *Budget
	overBudget prometheus.Counter
	// onPoll runs after each look of the watcher (Options.onPoll).
	onPoll func()
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
func (s *Server) setupTLS(c config.TLS, listen, httpListen, publicBaseURL string, now func() time.Time) error {
	if !c.Enabled() {
		return nil
	}
	certs, err := Load(c.Files(), now)
	if err != nil {
		return err
	}
	t := &s.tls
	t.certs = certs
	certs.Require(Required(c, publicBaseURL)...)
	for _, n := range certs.Uncovered() {
		s.log.Error("tls certificate files do not cover public_base_url's host: clients asking for it are refused in the handshake",
			"public_base_url", publicBaseURL, "uncovered", n, "files", strings.Join(fileNames(c.Files()), ","))
	}
	if len(c.ACME.Domains) > 0 {
		tlsPort, httpPort := portOf(listen), portOf(httpListen)
		if t.acme, err = NewACME(ACMEOptions{Settings: c.ACME, TLSPort: tlsPort, HTTPPort: httpPort,
			OnOrder: s.onACMEOrder, OnCached: s.onACMECached}); err != nil {
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
		s.reg.MustRegister(t.orders)
	}
	t.config, t.watchInterval = Config(certs), c.WatchInterval
	failures := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vendorgate_gateway_tls_handshake_failures_total",
		Help: "TLS handshakes on the public listener that failed, by reason: version_or_cipher, unknown_sni, bad_certificate (the client refused ours), timeout (not done within read_timeout), not_tls, closed (the client left), other, proxy_header (a trusted proxy's PROXY header missing or malformed, with proxy_protocol)."},
		[]string{"reason"})
	for _, r := range Reasons() {
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
	if t.budget, err = NewBudget(inProgress, perSecond, s.readTimeout/2); err != nil {
		return err
	}
	t.overBudget = prometheus.NewCounter(prometheus.CounterOpts{Name: "vendorgate_gateway_tls_handshakes_over_budget_total",
		Help: "TLS handshakes closed because tls.max_handshakes or tls.max_handshakes_per_second left no room for them within half of read_timeout."})
	inProgressGauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "vendorgate_gateway_tls_handshakes_in_progress",
		Help: "TLS handshakes in progress on the public listener, from the ClientHello to the handshake's end; at most tls.max_handshakes."},
		func() float64 { return float64(t.budget.InProgress()) })
	s.reg.MustRegister(failures, t.expiry, t.reloads, t.overBudget, inProgressGauge)
	for _, in := range certs.Certificates() {
		if in.RSA {
			s.log.Warn("tls certificate has an RSA key: a handshake costs about 1.1 ms of CPU (ECDSA P-256: about 0.23 ms); prefer an ECDSA key on a gateway that takes many new connections",
				"cert_file", in.CertFile, "names", strings.Join(in.Names, ","))
		}
	}
	s.setExpiry(certs.Certificates())
	for _, in := range certs.Certificates() {
		if in.Expired(now()) {
			s.log.Error("TLS CERTIFICATE EXPIRED: served until renewed; clients refuse it", "cert_file", in.CertFile,
				"names", strings.Join(in.Names, ","), "not_after", in.NotAfter.UTC().Format(time.RFC3339))
		}
	}
	if t.watchInterval > 0 {
		t.watchStop, t.watchDone = make(chan struct{}), make(chan struct{})
		go s.watchCertificates()
	}
	return nil
}

// Certificates describes the certificates served on the public listener;
// none with plain HTTP.
func (s *Server) Certificates() []Info {
	if s.tls.certs == nil {
		return nil
	}
	return s.tls.certs.Certificates()
}

// ReloadCertificates reads the certificate files again (SIGHUP) and swaps
// them in for new handshakes; established connections keep theirs. A file
// that cannot be read, a key that does not match, an expired certificate,
// or a set that drops a name in force (Store.Reload) is refused and the
// certificates in force stay. Files whose content has not changed are not
// read again (ErrUnchanged).
func (s *Server) ReloadCertificates() error {
	if s.tls.certs == nil {
		return nil
	}
	return s.reloadCertificates(s.tls.certs.Reload)
}

// reloadCertificates swaps the certificates with reload (the store's
// Reload or Poll), and logs and counts what came of it.
func (s *Server) reloadCertificates(reload func() ([]Info, error)) error {
	infos, err := reload()
	switch {
	case errors.Is(err, ErrUnchanged):
		return err
	case err != nil:
		s.tls.reloads.WithLabelValues("error").Inc()
		s.log.Error("tls certificate refused; the certificate in force stays", "err", err)
		return err
	}
	s.tls.reloads.WithLabelValues("ok").Inc()
	s.setExpiry(infos)
	for _, in := range infos {
		s.log.Info("tls certificate reloaded", "cert_file", in.CertFile, "names", strings.Join(in.Names, ","),
			"not_after", in.NotAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

// watchCertificates reloads the certificates whenever a file's content
// changes (a renewal written in place, a Kubernetes secret updated). A
// changed file that is refused is reported once, and only when it stays
// so for a second look (Store.Poll): a pair written one file after
// the other is not refused in between.
func (s *Server) watchCertificates() {
	defer close(s.tls.watchDone)
	t := time.NewTicker(s.tls.watchInterval)
	defer t.Stop()
	for {
		select {
		case <-s.tls.watchStop:
			return
		case <-t.C:
			_ = s.reloadCertificates(s.tls.certs.Poll) // logged and counted there
			if s.tls.onPoll != nil {
				s.tls.onPoll()
			}
		}
	}
}

// onACMEOrder logs and counts a finished ACME order, and updates the
// expiry gauge.
func (s *Server) onACMEOrder(domain string, renewal bool, err error) {
	kind := "obtain"
	if renewal {
		kind = "renew"
	}
	if err != nil {
		s.tls.orders.WithLabelValues(kind, "error").Inc()
		s.log.Error("acme certificate order failed; retried with backoff", "domain", domain, "kind", kind, "err", err)
		return
	}
	s.tls.orders.WithLabelValues(kind, "ok").Inc()
	s.log.Info("acme certificate obtained", "domain", domain, "kind", kind)
}

// onACMECached updates the expiry gauge when a managed certificate is
// taken into use (obtained, renewed, or loaded from storage at start).
func (s *Server) onACMECached(in Info) {
	s.setExpiry(s.tls.certs.Certificates())
	s.log.Info("tls certificate in force", "cert_file", in.CertFile, "names", strings.Join(in.Names, ","),
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
func (s *Server) TLSServed() string {
	if s.tls.certs == nil {
		return "off"
	}
	var parts []string
	for _, in := range s.tls.certs.Certificates() {
		if in.CertFile == "acme" {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s (%s) expires %s", strings.Join(in.Names, ","), in.CertFile, in.NotAfter.UTC().Format(time.RFC3339)))
	}
	if a := s.tls.acme; a != nil {
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

// ACMEMissing lists the domains of tls.acme.domains no certificate covers
// yet; managed is false without ACME.
func (s *Server) ACMEMissing() (missing []string, managed bool) {
	if s.tls.acme == nil {
		return nil, false
	}
	return s.tls.acme.Missing(), true
}

// HTTPChallenge answers an ACME HTTP-01 challenge on http_listen (not
// found unless an order is under way) and reports true, or reports false
// when path is not a challenge's or ACME is off.
func (s *Server) HTTPChallenge(ctx *fasthttp.RequestCtx, path []byte) bool {
	if s.tls.acme == nil || !bytes.HasPrefix(path, []byte("/.well-known/acme-challenge/")) {
		return false
	}
	s.tls.acme.HTTPChallenge(ctx)
	return true
}

// stopTLS ends the watcher and the ACME renewals; Close calls it.
func (s *Server) stopTLS() {
	if s.tls.acme != nil {
		s.tls.acme.Close()
		s.tls.acme = nil
	}
	if s.tls.watchStop != nil {
		close(s.tls.watchStop)
		<-s.tls.watchDone
		s.tls.watchStop = nil
	}
}

func (s *Server) setExpiry(infos []Info) {
	s.tls.expiryMu.Lock() // the watcher and ACME's events both set it
	defer s.tls.expiryMu.Unlock()
	s.tls.expiry.Reset()
	for _, in := range infos {
		s.tls.expiry.WithLabelValues(in.CertFile, strings.Join(in.Names, ",")).Set(float64(in.NotAfter.Unix()))
	}
}

// onHandshakeFailure counts a failed handshake; none is logged (a scanner
// would fill the log).
func (s *Server) onHandshakeFailure(r Reason) { s.tls.failures[r].Inc() }
