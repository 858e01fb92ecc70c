package main

import (
	"bufio"
	"bytes"
	"crypto/subtle"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"vendorgate/shared/apikey"
	"vendorgate/shared/wire"
)

// The responder and the bare proxy run as subprocesses of the loadbench
// binary itself, chosen by environment, so that the load generator, the
// backend and the proxy under test are separate processes as in a real
// deployment, and the backend costs the same CPU for every row.
const (
	envRole     = "LOADBENCH_ROLE"
	envListen   = "LOADBENCH_LISTEN"
	envUpstream = "LOADBENCH_UPSTREAM"
	envKeysFile = "LOADBENCH_KEYS_FILE"
	envToken    = "LOADBENCH_INTERNAL_TOKEN"
	// envTLSCert and envTLSKey, when set, make the bare proxy serve TLS
	// with that certificate (-tls).
	envTLSCert = "LOADBENCH_TLS_CERT"
	envTLSKey  = "LOADBENCH_TLS_KEY"
	// envPprof, when set, is where the bare proxy serves /debug/pprof/
	// (-tls-profile), so that its profile can be set beside the gateway's.
	envPprof = "LOADBENCH_PPROF_LISTEN"

	roleResponder = "responder"
	roleBareProxy = "bareproxy"
)

// mePath is the one vendor route every row is measured on.
const mePath = "/api/vendor/v1/me"

// runRole runs the subprocess role named by LOADBENCH_ROLE until SIGTERM.
// ok is false when no role is set, i.e. this is the benchmark itself.
func runRole() (ok bool, err error) {
	role := os.Getenv(envRole)
	if role == "" {
		return false, nil
	}
	ln, err := net.Listen("tcp4", os.Getenv(envListen))
	if err != nil {
		return true, fmt.Errorf("%s: listen: %w", role, err)
	}
	if cert := os.Getenv(envTLSCert); cert != "" {
		kp, err := tls.LoadX509KeyPair(cert, os.Getenv(envTLSKey))
		if err != nil {
			return true, fmt.Errorf("%s: %w", role, err)
		}
		ln = tls.NewListener(ln, bareTLSConfig(kp))
	}
	var h fasthttp.RequestHandler
	switch role {
	case roleResponder:
		r, err := newResponder(os.Getenv(envKeysFile), os.Getenv(envToken))
		if err != nil {
			return true, err
		}
		h = r.serve
	case roleBareProxy:
		if addr := os.Getenv(envPprof); addr != "" {
			pl, err := net.Listen("tcp4", addr)
			if err != nil {
				return true, fmt.Errorf("%s: pprof listen: %w", role, err)
			}
			mux := http.NewServeMux()
			mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
			mux.HandleFunc("/debug/pprof/heap", pprof.Index)
			go func() { _ = http.Serve(pl, mux) }()
		}
		h = newBareProxy(os.Getenv(envUpstream)).serve
	default:
		return true, fmt.Errorf("unknown %s %q", envRole, role)
	}
	srv := &fasthttp.Server{
		Handler:                       h,
		Name:                          "loadbench",
		NoDefaultServerHeader:         true,
		NoDefaultDate:                 false,
		DisableHeaderNamesNormalizing: false,
		IdleTimeout:                   30 * time.Second,
		Concurrency:                   1 << 18,
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return true, err
	case <-stop:
		return true, srv.Shutdown()
	}
}

// responder is the fixed backend: a small constant JSON for the vendor
// route, and the internal key lookup for the keys loadbench generated.
type responder struct {
	token   []byte
	me      []byte
	keys    map[string]int // key hash -> index
	created time.Time
	expires time.Time
	// lookups counts the key lookups answered, served on /metrics under
	// the backend's own metric name and route label.
	lookups atomic.Int64
}

// lookupMetric is the sample of the backend's request counter for the key
// lookup route, as the real backend exports it on /metrics.
const lookupMetric = "vendorgate_backend_requests_total"

// lookupRoute is the route label of the key lookups.
const lookupRoute = "/internal/v1/keys/{hash}"

func newResponder(keysFile, token string) (*responder, error) {
	me, err := json.Marshal(wire.Vendor{
		VendorID:        vendorID(0),
		CompanyName:     "Load Bench Vendor",
		Environment:     apikey.Sandbox,
		EnabledServices: wire.Services(),
	})
	if err != nil {
		return nil, err
	}
	r := &responder{token: []byte(token), me: me, keys: map[string]int{}}
	r.created = time.Now().UTC().Truncate(time.Second)
	r.expires = r.created.Add(90 * 24 * time.Hour)
	if keysFile == "" {
		return r, nil
	}
	f, err := os.Open(keysFile)
	if err != nil {
		return nil, fmt.Errorf("responder: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		hash, idx, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(idx)
		if err != nil {
			return nil, fmt.Errorf("responder: keys file: %w", err)
		}
		r.keys[hash] = n
	}
	return r, sc.Err()
}

func (r *responder) serve(ctx *fasthttp.RequestCtx) {
	path := ctx.Path()
	switch {
	case string(path) == mePath:
		ctx.Response.Header.SetContentType("application/json")
		ctx.Response.Header.Set("Cache-Control", "no-store")
		ctx.Response.SetBodyRaw(r.me)
	case bytes.HasPrefix(path, []byte(wire.KeyLookupPath)):
		r.lookups.Add(1)
		r.lookup(ctx, string(path[len(wire.KeyLookupPath):]))
	case string(path) == wire.UsageFlushPath:
		// The gateway posts its usage flushes here, as to the backend: taken,
		// unread. A 404 made every flush fail, and the gateway held each for
		// a retry (40 MB a flush at 100,000 vendors): the sweep's RSS was
		// that backlog's, not the gateway's own.
		ctx.Response.Header.SetContentType("application/json")
		if subtle.ConstantTimeCompare(ctx.Request.Header.Peek(wire.HeaderInternalToken), r.token) != 1 {
			ctx.SetStatusCode(fasthttp.StatusUnauthorized)
			ctx.SetBodyString(`{"error":{"code":"invalid_api_key","message":"internal token required"}}`)
			return
		}
		ctx.SetBodyString(`{}`)
	case string(path) == "/metrics":
		ctx.Response.Header.SetContentType("text/plain; version=0.0.4")
		fmt.Fprintf(ctx, "%s{route=%q,method=\"GET\"} %d\n", lookupMetric, lookupRoute, r.lookups.Load())
	default:
		ctx.Response.Header.SetContentType("application/json")
		ctx.SetStatusCode(fasthttp.StatusNotFound)
		ctx.SetBodyString(`{"error":{"code":"not_found","message":"not found"}}`)
	}
}

func (r *responder) lookup(ctx *fasthttp.RequestCtx, hash string) {
	ctx.Response.Header.SetContentType("application/json")
	ctx.Response.Header.Set("Cache-Control", "no-store")
	if subtle.ConstantTimeCompare(ctx.Request.Header.Peek(wire.HeaderInternalToken), r.token) != 1 {
		ctx.SetStatusCode(fasthttp.StatusUnauthorized)
		ctx.SetBodyString(`{"error":{"code":"invalid_api_key","message":"internal token required"}}`)
		return
	}
	i, ok := r.keys[hash]
	if !ok {
		ctx.SetStatusCode(fasthttp.StatusNotFound)
		ctx.SetBodyString(`{"error":{"code":"not_found","message":"no key has that hash"}}`)
		return
	}
	b, err := json.Marshal(wire.KeyResolution{
		KeyID:       keyID(i),
		VendorID:    vendorID(i),
		Environment: apikey.Sandbox,
		CreatedAt:   r.created,
		ExpiresAt:   r.expires,
		Vendor: wire.VendorInfo{
			Status:          wire.VendorApproved,
			CompanyName:     "Load Bench Vendor " + strconv.Itoa(i),
			EnabledServices: wire.Services(),
		},
	})
	if err != nil {
		ctx.SetStatusCode(fasthttp.StatusInternalServerError)
		return
	}
	ctx.SetBody(b)
}

// Each generated key belongs to its own vendor: 10,000 keys then also mean
// 10,000 limiter buckets, the costly case for the memory figure.
func vendorID(i int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", i) }
func keyID(i int) string    { return fmt.Sprintf("00000000-0000-4000-9000-%012d", i) }

// bareTLSConfig is the bare proxy's TLS: crypto/tls's defaults (session
// tickets on, with keys the process makes) but for TLS 1.2 at least, as
// the gateway, ALPN http/1.1, and the curve pinned to P-256 on this side
// too (-tls).
func bareTLSConfig(kp tls.Certificate) *tls.Config {
	return &tls.Config{
		Certificates:     []tls.Certificate{kp},
		MinVersion:       tls.VersionTLS12,
		NextProtos:       []string{"http/1.1"},
		CurvePreferences: []tls.CurveID{tls.CurveP256},
	}
}

// bareProxy is the floor of proxying: a fasthttp server handing every
// request to one HostClient, with no auth, no limits and no header work
// beyond dropping the client's Connection header.
type bareProxy struct{ hc *fasthttp.HostClient }

func newBareProxy(upstream string) *bareProxy {
	return &bareProxy{hc: &fasthttp.HostClient{
		Addr:                      upstream,
		MaxConns:                  1024,
		MaxIdemponentCallAttempts: 1,
		NoDefaultUserAgentHeader:  true,
		ReadTimeout:               10 * time.Second,
		WriteTimeout:              10 * time.Second,
	}}
}

func (p *bareProxy) serve(ctx *fasthttp.RequestCtx) {
	req := &ctx.Request
	req.Header.Del("Connection")
	req.SetHost(p.hc.Addr)
	if ctx.IsTLS() { // the upstream hop is plain HTTP
		req.URI().SetScheme("http")
	}
	if err := p.hc.Do(req, &ctx.Response); err != nil {
		ctx.ResetBody()
		ctx.SetStatusCode(fasthttp.StatusBadGateway)
		return
	}
	ctx.Response.Header.Del("Connection")
}
