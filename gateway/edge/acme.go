package edge

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/caddyserver/certmagic"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
	"go.uber.org/zap"

	"vendorgate/config"
)

// ACMEOptions configures NewACME.
type ACMEOptions struct {
	Settings config.ACME
	// TLSPort is the public listener's port: the CA's TLS-ALPN-01
	// validation reaches it there, and CertMagic, finding it taken, does
	// not open a listener of its own.
	TLSPort int
	// HTTPPort is http_listen's port, where HTTP-01 is answered; 0: no
	// plain listener, HTTP-01 off.
	HTTPPort int
	// OnOrder is told of each finished order: renewal or first, and its
	// error (nil: obtained). Required.
	OnOrder func(domain string, renewal bool, err error)
	// OnCached is told of each managed certificate taken into use (from
	// an order or from storage), with its description. Required.
	OnCached func(Info)
}

// ACME obtains and renews certificates from an ACME CA (CertMagic), and
// answers its TLS-ALPN-01 and HTTP-01 challenges on the gateway's own
// listeners. Its certificates, account and locks live in a directory:
// replicas sharing it share the certificates and renew them once.
type ACME struct {
	cfg     *certmagic.Config
	cache   *certmagic.Cache
	issuer  *certmagic.ACMEIssuer
	domains []string
	http    fasthttp.RequestHandler
	cancel  context.CancelFunc
}

// NewACME checks the settings and prepares the issuer; Manage starts the
// orders.
func NewACME(o ACMEOptions) (*ACME, error) {
	s := o.Settings
	var roots *x509.CertPool
	if s.CARootFile != "" {
		pem, err := os.ReadFile(s.CARootFile)
		if err != nil {
			return nil, fmt.Errorf("tls.acme.ca_root_file %s: %w", s.CARootFile, pathless(err))
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls.acme.ca_root_file %s: no PEM certificate in it", s.CARootFile)
		}
	}
	if err := os.MkdirAll(s.Storage, 0o700); err != nil {
		return nil, fmt.Errorf("tls.acme.storage %s: %w", s.Storage, pathless(err))
	}
	a := &ACME{domains: slices.Clone(s.Domains)}
	for i, d := range a.domains {
		a.domains[i] = strings.ToLower(d)
	}
	a.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert: func(certmagic.Certificate) (*certmagic.Config, error) { return a.cfg, nil },
		Logger:           zap.NewNop(),
	})
	a.cfg = certmagic.New(a.cache, certmagic.Config{
		Storage:           &certmagic.FileStorage{Path: s.Storage},
		DefaultServerName: a.domains[0],
		// The CA's own stapling status is not fetched (Let's Encrypt has
		// ended OCSP; see Config in listener.go).
		OCSP:   certmagic.OCSPConfig{DisableStapling: true},
		Logger: zap.NewNop(), // each order is logged and counted through OnEvent
		OnEvent: func(_ context.Context, event string, data map[string]any) error {
			a.onEvent(o, event, data)
			return nil
		},
	})
	a.issuer = certmagic.NewACMEIssuer(a.cfg, certmagic.ACMEIssuer{
		CA: s.CA, Email: s.Email, Agreed: true, TrustedRoots: roots,
		AltTLSALPNPort: o.TLSPort, AltHTTPPort: o.HTTPPort, DisableHTTPChallenge: o.HTTPPort == 0,
		Logger: zap.NewNop(),
	})
	a.cfg.Issuers = []certmagic.Issuer{a.issuer}
	a.http = fasthttpadaptor.NewFastHTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !a.issuer.HandleHTTPChallenge(w, r) {
			http.NotFound(w, r)
		}
	}))
	return a, nil
}

// onEvent turns CertMagic's events into OnOrder and OnCached calls.
func (a *ACME) onEvent(o ACMEOptions, event string, data map[string]any) {
	if event == "cached_managed_cert" {
		sans, _ := data["sans"].([]string)
		for _, in := range a.Certificates() {
			if len(sans) > 0 && slices.Contains(in.Names, sans[0]) {
				o.OnCached(in)
			}
		}
		return
	}
	if event != "cert_obtained" && event != "cert_failed" {
		return
	}
	name, _ := data["identifier"].(string)
	renewal, _ := data["renewal"].(bool)
	var err error
	if event == "cert_failed" {
		err, _ = data["error"].(error)
		if err == nil {
			err = errors.New("order failed")
		}
	}
	o.OnOrder(name, renewal, err)
}

// Manage starts obtaining (or loading from storage) and renewing the
// certificates, in the background: the public listener must be serving
// for the TLS-ALPN-01 challenge to be answered.
func (a *ACME) Manage() error {
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	return a.cfg.ManageAsync(ctx, a.domains)
}

// Close stops the orders and renewals and releases the storage's locks.
func (a *ACME) Close() {
	if a.cancel != nil {
		a.cancel()
	}
	a.cache.Stop()
}

// covers reports whether name (lower case) is one of the domains.
func (a *ACME) covers(name string) bool { return slices.Contains(a.domains, name) }

// getCertificate answers a handshake for one of the domains: the
// TLS-ALPN-01 challenge certificate when the CA validates, else the
// managed certificate.
func (a *ACME) getCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	return a.cfg.GetCertificate(hello)
}

// HTTPChallenge answers /.well-known/acme-challenge/ on the plain listener.
func (a *ACME) HTTPChallenge(ctx *fasthttp.RequestCtx) { a.http(ctx) }

// IsChallenge reports whether a handshake is the CA's TLS-ALPN-01
// validation (the only protocol offered is acme-tls/1).
func IsChallenge(hello *tls.ClientHelloInfo) bool {
	return len(hello.SupportedProtos) == 1 && hello.SupportedProtos[0] == acmeTLS1
}

const acmeTLS1 = "acme-tls/1"

// Domains are the names managed, lower case.
func (a *ACME) Domains() []string { return slices.Clone(a.domains) }

// Missing lists the domains no managed certificate covers yet: every
// handshake for them fails (readiness, the start line).
func (a *ACME) Missing() []string {
	var out []string
	for _, d := range a.domains {
		have := false
		for _, c := range a.cache.AllMatchingCertificates(d) {
			if c.Leaf != nil {
				have = true
				break
			}
		}
		if !have {
			out = append(out, d)
		}
	}
	return out
}

// Certificates describes the managed certificates in the cache.
func (a *ACME) Certificates() []Info {
	var out []Info
	for _, d := range a.domains {
		for _, c := range a.cache.AllMatchingCertificates(d) {
			if c.Leaf == nil {
				continue
			}
			out = append(out, Info{CertFile: "acme", Names: c.Names, NotAfter: c.Leaf.NotAfter})
			break
		}
	}
	return out
}
