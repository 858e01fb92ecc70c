package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"vendorgate/bench/internal/childproc"
	"vendorgate/bench/internal/wrk"
)

// The rows of -tls: each TLS row beside its plain-HTTP row, so that a
// row's TLS cost is its CPU with TLS less its CPU without, in one run.
const (
	rowBareTLS    = "bare-tls"
	rowGatewayTLS = "gateway-tls"
	rowNginxTLS   = "nginx-tls"
)

// tlsRowIDs are the rows of -tls, in the table's order.
var tlsRowIDs = []string{rowBare, rowBareTLS, rowGateway, rowGatewayTLS, rowNginx, rowNginxTLS}

// tlsPairs pairs each TLS row with its plain row.
var tlsPairs = [][2]string{{rowBare, rowBareTLS}, {rowGateway, rowGatewayTLS}, {rowNginx, rowNginxTLS}}

// tlsRowLabel names the rows of -tls.
func tlsRowLabel(id string) (string, bool) {
	switch id {
	case rowBareTLS:
		return "bare fasthttp proxy, TLS", true
	case rowGatewayTLS:
		return "vendorgate, in-process limiter, TLS", true
	case rowNginxTLS:
		return "nginx proxy_pass, TLS", true
	}
	return "", false
}

// tlsKit is the one certificate every TLS row serves: an ECDSA P-256 leaf
// for localhost and 127.0.0.1, signed by a P-256 CA made for the run, which
// the handshake client trusts (so it verifies a chain, as a real client
// does), and the OpenSSL configuration that pins wrk to P-256.
type tlsKit struct {
	cert, key   string // PEM files of the leaf and its key
	pool        *x509.CertPool
	opensslConf string
}

func makeTLSKit(dir string) (*tlsKit, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "loadbench CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "localhost"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &leafKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(leafKey)
	if err != nil {
		return nil, err
	}
	k := &tlsKit{cert: filepath.Join(dir, "tls-cert.pem"), key: filepath.Join(dir, "tls-key.pem"),
		opensslConf: filepath.Join(dir, "openssl-p256.cnf"), pool: x509.NewCertPool()}
	k.pool.AddCert(ca)
	if err := os.WriteFile(k.cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(k.key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return nil, err
	}
	// OpenSSL's system_default section applies to every SSL_CTX of the
	// process: wrk offers P-256 alone.
	conf := "openssl_conf = openssl_init\n[openssl_init]\nssl_conf = ssl_module\n[ssl_module]\nsystem_default = tls_defaults\n[tls_defaults]\nGroups = P-256\n"
	if err := os.WriteFile(k.opensslConf, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	return k, nil
}

// clientConfig is the handshake client's: P-256 only, no session
// resumption (no tickets, no session cache), the chain verified.
func (k *tlsKit) clientConfig() *tls.Config {
	return &tls.Config{
		RootCAs:                k.pool,
		ServerName:             "localhost",
		MinVersion:             tls.VersionTLS12,
		NextProtos:             []string{"http/1.1"},
		CurvePreferences:       []tls.CurveID{tls.CurveP256},
		SessionTicketsDisabled: true,
	}
}

// nginxTLSConfig is nginxConfig's server over TLS: the same certificate,
// P-256 pinned, a shared session cache, keep-alive as the plain row.
const nginxTLSConfig = `worker_processes auto;
daemon off;
pid {{DIR}}/nginx-tls.pid;
error_log {{DIR}}/nginx-tls-error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path {{DIR}}/nginx-body;
  proxy_temp_path {{DIR}}/nginx-proxy;
  fastcgi_temp_path {{DIR}}/nginx-fastcgi;
  uwsgi_temp_path {{DIR}}/nginx-uwsgi;
  scgi_temp_path {{DIR}}/nginx-scgi;
  keepalive_requests 1000000;
  upstream backend {
    server {{BACKEND}};
    keepalive 64;
    keepalive_requests 1000000;
  }
  server {
    listen {{LISTEN}} ssl;
    ssl_certificate {{DIR}}/tls-cert.pem;
    ssl_certificate_key {{DIR}}/tls-key.pem;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_ecdh_curve prime256v1;
    ssl_session_cache shared:SSL:10m;
    location / {
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
`

// startTLSRows starts the rows of -tls.
func (b *bench) startTLSRows() error {
	k, err := makeTLSKit(b.dir)
	if err != nil {
		return err
	}
	b.tlsKit, b.tlsClient = k, k.clientConfig()
	b.findGateway()
	tlsEnv := []string{"GATEWAY_TLS_CERT_FILE=" + k.cert, "GATEWAY_TLS_KEY_FILE=" + k.key, "GATEWAY_ADMIN_TOKEN=" + heapToken}
	for _, id := range tlsRowIDs {
		var r *row
		var err error
		switch id {
		case rowBare, rowBareTLS:
			env := b.goEnv()
			if id == rowBareTLS {
				env = append(env, envTLSCert+"="+k.cert, envTLSKey+"="+k.key)
			}
			if b.opts.tlsProfile != "" {
				a, err := childproc.FreeAddr()
				if err != nil {
					return err
				}
				env = append(env, envPprof+"="+a)
			}
			r, err = b.startBareProxy(env...)
			if r != nil {
				r.id = id
			}
		case rowGateway, rowGatewayTLS:
			if b.gatewayBin == "" {
				r = &row{id: id, skip: b.gatewaySkip}
				break
			}
			env := append([]string{"GATEWAY_ADMIN_TOKEN=" + heapToken}, b.goEnv()...)
			if id == rowGatewayTLS {
				env = append(tlsEnv, b.goEnv()...)
			}
			r, err = b.startGatewayConfig(id, b.gatewayBin, false, gatewayConfig(b.floodVendor), env...)
		case rowNginx:
			r, err = b.startNginx()
		case rowNginxTLS:
			r, err = b.startProxy(rowNginxTLS, "nginx", "nginx-tls.conf", nginxTLSConfig, func(conf string) []string {
				return []string{"-e", filepath.Join(b.dir, "nginx-tls-error.log"), "-p", b.dir, "-c", conf}
			})
		}
		if r != nil {
			b.rows = append(b.rows, r)
		}
		if err != nil {
			return fmt.Errorf("start %s: %w", rowLabel(id), err)
		}
		if isTLSRow(id) {
			r.url = strings.Replace(r.url, "http://", "https://", 1)
		}
		if r.skip == "" {
			st, err := b.oneConn(r, true)
			if err != nil {
				r.stop()
				r.skip = err.Error()
			} else if isTLSRow(id) {
				b.tlsStates = append(b.tlsStates, fmt.Sprintf("%s: %s, %s, %s", r.label(), tls.VersionName(st.Version),
					tls.CipherSuiteName(st.CipherSuite), st.CurveID))
			}
		}
		if r.skip != "" {
			b.logf("%s: skipped: %s", r.label(), r.skip)
		} else {
			b.logf("%s: ready at %s", r.label(), r.url)
		}
	}
	return nil
}

// goEnv is the Go servers' GOGC under -tls-gogc.
func (b *bench) goEnv() []string {
	if b.opts.tlsGOGC == "" {
		return nil
	}
	return []string{"GOGC=" + b.opts.tlsGOGC}
}

func isTLSRow(id string) bool { _, ok := tlsRowLabel(id); return ok }

// hostOf is the host:port of a row's URL.
func hostOf(url string) string {
	s := url[strings.Index(url, "://")+3:]
	if i := strings.IndexByte(s, '/'); i >= 0 {
		s = s[:i]
	}
	return s
}

// oneConn opens a new connection to r (a full handshake on a TLS row),
// sends one request with Connection: close and wants the responder's exact
// answer. check says whether the curve must be P-256.
func (b *bench) oneConn(r *row, check bool) (tls.ConnectionState, error) {
	var st tls.ConnectionState
	host := hostOf(r.url)
	c, err := net.DialTimeout("tcp", host, 5*time.Second)
	if err != nil {
		return st, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	conn := c
	if isTLSRow(r.id) {
		tc := tls.Client(c, b.tlsClient)
		if err := tc.Handshake(); err != nil {
			return st, fmt.Errorf("handshake: %w", err)
		}
		st = tc.ConnectionState()
		if check && st.CurveID != tls.CurveP256 {
			return st, fmt.Errorf("%s negotiated %s, want P-256", r.label(), st.CurveID)
		}
		conn = tc
	}
	if _, err := conn.Write(b.closeRequest(host)); err != nil {
		return st, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return st, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return st, err
	}
	if resp.StatusCode != http.StatusOK || !bytes.Equal(body, b.meBody) {
		return st, fmt.Errorf("%s answered %d %q, want 200 with the responder's body", r.label(), resp.StatusCode, body)
	}
	return st, nil
}

func (b *bench) closeRequest(host string) []byte {
	return []byte("GET " + mePath + " HTTP/1.1\r\nHost: " + host + "\r\nX-API-Key: " + b.one.keys[0] + "\r\nConnection: close\r\n\r\n")
}

// connRun is one run of the new-connection load on one row.
type connRun struct {
	conns, failed int64
	firstErr      string
	elapsed       time.Duration
	cpu           time.Duration
	wall          time.Duration // from the first CPU reading to the second
	cpuOK         bool
}

// connLoad opens a new connection for every request (a full handshake
// each on a TLS row: the client keeps no session), with workers in
// flight, for d or until limit connections.
func (b *bench) connLoad(r *row, workers int, d time.Duration, limit int64) connRun {
	var out connRun
	var started, done, failed atomic.Int64
	var firstErr atomic.Value
	cpuBefore := b.cpuOf(r)
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) && started.Add(1) <= limit {
				_, err := b.oneConn(r, false)
				done.Add(1)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
			}
		}()
	}
	wg.Wait()
	out.elapsed = time.Since(start)
	out.conns = done.Load()
	out.failed = failed.Load()
	if e, ok := firstErr.Load().(string); ok {
		out.firstErr = e
	}
	if cpuAfter := b.cpuOf(r); cpuBefore != nil && cpuAfter != nil {
		out.cpu, out.cpuOK = cpuAfter[0]-cpuBefore[0], true
	}
	out.wall = time.Since(start)
	return out
}

// keepAlive runs wrk on r with the one-key load, pinned to P-256 on a TLS
// row, and reads the server's CPU over the run.
func (b *bench) keepAlive(r *row, conns int, d time.Duration) (measurement, error) {
	w, ok := b.gen.(*wrkGen)
	if !ok {
		return measurement{}, errors.New("-tls needs wrk")
	}
	l := wrk.Load{URL: r.url, Threads: w.threads, Conns: conns, Duration: d, Header: b.one.header()}
	if isTLSRow(r.id) {
		l.Env = []string{"OPENSSL_CONF=" + b.tlsKit.opensslConf}
	}
	scBefore, scErr := syscalls(r.procs[0].Pid())
	cpuBefore, start := b.cpuOf(r), time.Now()
	s, err := w.runner.Run(context.Background(), l)
	if err != nil {
		return measurement{}, err
	}
	m := fromWrk(s)
	if cpuAfter := b.cpuOf(r); cpuBefore != nil && cpuAfter != nil {
		m.ProxyCPU, m.CPUOK = cpuAfter[0]-cpuBefore[0], true
	}
	m.Wall = time.Since(start)
	if scAfter, err := syscalls(r.procs[0].Pid()); err == nil && scErr == nil {
		m.Syscalls = scAfter - scBefore
	}
	if r.main != nil && r.main.Exited() {
		r.skip = "exited during the run: " + r.main.Tail()
		return m, errors.New(r.skip)
	}
	return m, nil
}

// tlsResults are the runs of -tls, by row and round.
type tlsResults struct {
	rounds    int
	ka        map[string][]*measurement
	hs        map[string][]*connRun
	notes     []string
	kaConns   int
	hsWorkers int
	hsLimit   int64
	profiles  []string
	// idle is each row's CPU per second of wall time with no load (its
	// timers, probes and collector), read before and after the rounds.
	idle map[string]float64
}

// tlsAlone is -tls: the rows of tlsRowIDs, keep-alive and new-connection
// loads interleaved round by round, and the report written to -tls-out.
func (b *bench) tlsAlone(ctx context.Context, out string, stdout, stderr io.Writer) error {
	o := b.opts
	if err := b.startTLSRows(); err != nil {
		return err
	}
	conns := 64
	if len(o.conns) > 0 {
		conns = o.conns[0]
	}
	res := &tlsResults{rounds: o.reps, ka: map[string][]*measurement{}, hs: map[string][]*connRun{},
		kaConns: conns, hsWorkers: o.handshakeConns, hsLimit: int64(o.handshakeMax)}
	active := b.active()
	for _, r := range active {
		res.ka[r.id] = make([]*measurement, o.reps)
		res.hs[r.id] = make([]*connRun, o.reps)
	}
	b.logf("load average before the runs: %s", loadAverage())
	idleBefore := b.idleCPU(active, o.duration)
	if o.warmup > 0 {
		for _, r := range active {
			if _, err := b.keepAlive(r, conns, max(o.warmup, time.Second)); err != nil {
				r.skip = "warm-up failed: " + err.Error()
			}
			b.connLoad(r, res.hsWorkers, o.warmup/2, 500)
		}
	}
	for rep := 0; rep < o.reps; rep++ {
		rows := b.active()
		// Each round starts one row further on: no row always runs
		// first or after the same neighbour.
		rows = append(rows[rep%len(rows):], rows[:rep%len(rows)]...)
		for _, r := range rows {
			if err := ctx.Err(); err != nil {
				return err
			}
			m, err := b.keepAlive(r, conns, o.duration)
			if err != nil {
				res.notes = append(res.notes, fmt.Sprintf("%s, keep-alive, round %d: %v", r.label(), rep+1, err))
				continue
			}
			if m.Failed > 0 {
				res.notes = append(res.notes, fmt.Sprintf("%s, keep-alive, round %d: %d of %d requests failed (%s)", r.label(), rep+1, m.Failed, m.Requests, m.FailedDetail))
			}
			res.ka[r.id][rep] = &m
			b.logf("round %d/%d  keep-alive  %-38s %8.0f req/s  CPU %s/request  p99 %s", rep+1, o.reps, r.label(), m.RPS,
				perRequest(m.ProxyCPU, m.OK), ms(m.P99))
		}
		for _, r := range rows {
			if err := ctx.Err(); err != nil {
				return err
			}
			h := b.connLoad(r, res.hsWorkers, o.duration, res.hsLimit)
			if h.failed > 0 {
				res.notes = append(res.notes, fmt.Sprintf("%s, new connections, round %d: %d of %d failed (first: %s)", r.label(), rep+1, h.failed, h.conns, h.firstErr))
			}
			res.hs[r.id][rep] = &h
			b.logf("round %d/%d  new conns   %-38s %8.0f conn/s  CPU %s/connection", rep+1, o.reps, r.label(),
				float64(h.conns-h.failed)/h.elapsed.Seconds(), perRequest(h.cpu, h.conns-h.failed))
		}
	}
	res.idle = map[string]float64{}
	idleAfter := b.idleCPU(active, o.duration)
	for _, r := range active {
		a, okA := idleBefore[r.id]
		z, okZ := idleAfter[r.id]
		if okA && okZ {
			res.idle[r.id] = (a + z) / 2
		}
	}
	if o.tlsProfile != "" {
		b.tlsProfiles(res, conns)
	}
	e := collectEnv(b)
	report := res.markdown(b, e)
	if _, err := io.WriteString(stdout, report); err != nil {
		return err
	}
	if out == "" {
		return nil
	}
	if old, err := os.ReadFile(out); err == nil {
		report += tlsKeptSection(string(old))
	}
	if err := os.WriteFile(out, []byte(report), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	fmt.Fprintf(stderr, "wrote %s\n", out)
	return nil
}

// idleCPU reads each row's CPU over d with no load, all rows at once: the
// CPU a server spends whatever it serves (seconds per second). A row at a
// lower rate (a TLS row: wrk and the handshake client do more per request)
// would otherwise be charged more of it per request.
func (b *bench) idleCPU(rows []*row, d time.Duration) map[string]float64 {
	before := map[string][]time.Duration{}
	for _, r := range rows {
		before[r.id] = b.cpuOf(r)
	}
	start := time.Now()
	time.Sleep(d)
	out := map[string]float64{}
	for _, r := range rows {
		if after := b.cpuOf(r); after != nil && before[r.id] != nil {
			out[r.id] = (after[0] - before[r.id][0]).Seconds() / time.Since(start).Seconds()
		}
	}
	return out
}

// tlsProfiles takes CPU profiles of each Go row (the gateway's and the
// bare proxy's), one under the
// keep-alive load and one under the new-connection load, after the
// measured rounds (a profile costs CPU), into -tls-profile: compare them
// with go tool pprof -diff_base.
func (b *bench) tlsProfiles(res *tlsResults, conns int) {
	if err := os.MkdirAll(b.opts.tlsProfile, 0o755); err != nil {
		res.notes = append(res.notes, "profile: "+err.Error())
		return
	}
	secs := max(int(b.opts.duration.Seconds()), 2)
	for _, r := range b.active() {
		if r.pprof == "" {
			continue
		}
		loads := []struct {
			name string
			run  func(time.Duration) error
		}{
			{"keepalive", func(d time.Duration) error {
				m, err := b.keepAlive(r, conns, d)
				if err == nil {
					b.logf("%s: keep-alive under the profile: %.0f req/s", r.label(), m.RPS)
				}
				return err
			}},
			{"newconns", func(d time.Duration) error {
				h := b.connLoad(r, res.hsWorkers, d, 1<<40)
				if h.failed > 0 {
					return fmt.Errorf("%d of %d connections failed: %s", h.failed, h.conns, h.firstErr)
				}
				b.logf("%s: new connections under the profile: %.0f a second", r.label(), float64(h.conns)/h.elapsed.Seconds())
				return nil
			}},
		}
		for _, l := range loads {
			done := make(chan error, 1)
			go func() { done <- l.run(time.Duration(secs+2) * time.Second) }()
			time.Sleep(time.Second)
			file := filepath.Join(b.opts.tlsProfile, "cpu-"+r.id+"-"+l.name+".pb.gz")
			err := fetchProfile(r.pprof, secs, file)
			if werr := <-done; err == nil {
				err = werr
			}
			if err != nil {
				res.notes = append(res.notes, fmt.Sprintf("profile of %s, %s: %v", r.label(), l.name, err))
				continue
			}
			res.profiles = append(res.profiles, filepath.Base(file))
			b.logf("%s: CPU profile in %s", r.label(), file)
		}
		// The live heap sets how much marking each byte allocated costs
		// (a handshake allocates tens of KB in crypto/tls).
		base := filepath.Join(b.opts.tlsProfile, "heap-"+r.id)
		if r.admin == "" {
			continue
		}
		if err := saveHeap(r.admin, base); err != nil {
			res.notes = append(res.notes, fmt.Sprintf("heap profile of %s: %v", r.label(), err))
			continue
		}
		res.profiles = append(res.profiles, filepath.Base(base)+".pb.gz", filepath.Base(base)+".txt")
	}
}

// fetchProfile writes a CPU profile of secs from a gateway's admin
// listener to file.
func fetchProfile(admin string, secs int, file string) error {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", admin, secs))
	req.Header.Set("Authorization", "Bearer "+heapToken)
	if err := fasthttp.DoTimeout(req, resp, time.Duration(secs+30)*time.Second); err != nil {
		return err
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		return fmt.Errorf("%s answered %d", req.URI(), resp.StatusCode())
	}
	return os.WriteFile(file, resp.Body(), 0o644)
}

// tlsKeptHeading begins the hand-written part of docs/bench-tls.md, kept
// by a rewrite.
const tlsKeptHeading = "## Reading the figures"

func tlsKeptSection(old string) string {
	i := strings.Index(old, "\n"+tlsKeptHeading)
	if i < 0 {
		return ""
	}
	return old[i:]
}

// pooled sums the CPU and the answers of a row's rounds: CPU per request
// over the whole run.
func pooledKA(ms []*measurement) (cpu time.Duration, ok int64, rps []float64, p99 []float64, good bool) {
	good = true
	for _, m := range ms {
		if m == nil {
			continue
		}
		cpu += m.ProxyCPU
		ok += m.OK
		rps = append(rps, m.RPS)
		p99 = append(p99, float64(m.P99))
		good = good && m.CPUOK
	}
	return cpu, ok, rps, p99, good && ok > 0
}

func pooledHS(hs []*connRun) (cpu time.Duration, ok int64, rate []float64, good bool) {
	good = true
	for _, h := range hs {
		if h == nil {
			continue
		}
		cpu += h.cpu
		ok += h.conns - h.failed
		rate = append(rate, float64(h.conns-h.failed)/h.elapsed.Seconds())
		good = good && h.cpuOK
	}
	return cpu, ok, rate, good && ok > 0
}

func usPer(d time.Duration, n int64) float64 {
	return float64(d) / float64(time.Microsecond) / float64(n)
}

// tlsCost is, for each pair, the TLS row's CPU per request (or per
// connection) less the plain row's: over the whole run, and round by
// round.
type tlsCost struct {
	ok      bool
	whole   float64
	byRound []float64
}

func costOf(plain, withTLS func(rep int) (time.Duration, int64, bool), rounds int) tlsCost {
	var c tlsCost
	var pc, tc time.Duration
	var pn, tn int64
	for rep := 0; rep < rounds; rep++ {
		p, n1, ok1 := plain(rep)
		t, n2, ok2 := withTLS(rep)
		if !ok1 || !ok2 || n1 == 0 || n2 == 0 {
			continue
		}
		pc, pn, tc, tn = pc+p, pn+n1, tc+t, tn+n2
		c.byRound = append(c.byRound, usPer(t, n2)-usPer(p, n1))
	}
	if pn > 0 && tn > 0 {
		c.whole, c.ok = usPer(tc, tn)-usPer(pc, pn), true
	}
	return c
}

// busy is cpu less the row's idle CPU over wall.
func (res *tlsResults) busy(id string, cpu, wall time.Duration) time.Duration {
	return cpu - time.Duration(res.idle[id]*float64(wall))
}

func (res *tlsResults) kaCost(plainID, tlsID string) tlsCost {
	get := func(id string) func(int) (time.Duration, int64, bool) {
		return func(rep int) (time.Duration, int64, bool) {
			ms := res.ka[id]
			if rep >= len(ms) || ms[rep] == nil || !ms[rep].CPUOK {
				return 0, 0, false
			}
			return res.busy(id, ms[rep].ProxyCPU, ms[rep].Wall), ms[rep].OK, true
		}
	}
	return costOf(get(plainID), get(tlsID), res.rounds)
}

func (res *tlsResults) hsCost(plainID, tlsID string) tlsCost {
	get := func(id string) func(int) (time.Duration, int64, bool) {
		return func(rep int) (time.Duration, int64, bool) {
			hs := res.hs[id]
			if rep >= len(hs) || hs[rep] == nil || !hs[rep].cpuOK {
				return 0, 0, false
			}
			return res.busy(id, hs[rep].cpu, hs[rep].wall), hs[rep].conns - hs[rep].failed, true
		}
	}
	return costOf(get(plainID), get(tlsID), res.rounds)
}

func roundList(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%.1f", x)
	}
	return strings.Join(s, ", ")
}

// markdown is docs/bench-tls.md.
func (res *tlsResults) markdown(b *bench, e envInfo) string {
	var sb strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&sb, format, a...) }
	w("# TLS load benchmark\n\n")
	w("Written by `%s`; run it again to refresh. Do not edit by hand, but for the section %q at the end, which a rewrite keeps.\n\n",
		strings.TrimSpace("cd bench && go run ./loadbench "+shellArgs(b.opts.args)), strings.TrimPrefix(tlsKeptHeading, "## "))
	w("- Date: %s\n", e.date.Format("2006-01-02 15:04 UTC"))
	w("- Machine: %s, %d cores, Linux %s\n", e.cpu, e.cores, e.kernel)
	w("- Go: %s; vendorgate commit %s\n", e.goVer, e.commit)
	w("- Load average (1, 5, 15 min) at the start: %s; at the end: %s\n", e.loadBefore, e.loadAfter)
	for _, t := range e.tools {
		w("- %s\n", t)
	}
	if v, err := exec.Command("openssl", "version").Output(); err == nil {
		w("- %s (wrk's and nginx's TLS)\n", strings.TrimSpace(string(v)))
	}
	w("- Negotiated by the handshake client (Go): %s\n", strings.Join(b.tlsStates, "; "))
	if b.opts.tlsGOGC != "" {
		w("- GOGC=%s in the bare proxy and the gateway (-tls-gogc)\n", b.opts.tlsGOGC)
	}
	w("\n## Method\n\n")
	w(`Three servers, each twice in one run, plain HTTP and TLS, in front of the same JSON responder on
loopback: the bare fasthttp proxy (crypto/tls's defaults, TLS 1.2 at least), vendorgate with its
in-process limiter (tls.cert_file and tls.key_file, its own TLS settings: docs/tls.md) and nginx
(listen ssl, ssl_session_cache shared:SSL:10m, keep-alive). All serve one ECDSA P-256 certificate
made for the run (signed by a P-256 CA the client trusts). The key exchange is P-256 on every row:
the clients offer P-256 alone (the handshake client's tls.Config CurvePreferences; wrk through an
OPENSSL_CONF whose system_default Groups is P-256), and the bare proxy and nginx (ssl_ecdh_curve
prime256v1) are pinned on the server side too; the gateway keeps Go's default curve list and so
takes the client's P-256 (the line above shows what each TLS row negotiated).

Two loads, each round running every row once, the rows interleaved and each round starting one row
further on:

- keep-alive: wrk (1 thread, %d connections, %s) with one valid API key: requests per second
  and the server's CPU per request (user plus system time of the server's processes from /proc,
  nginx's workers included);
- new connections: a Go client, %d workers, each request on a new connection with Connection:
  close and no session resumption (SessionTicketsDisabled, no ClientSessionCache), the server's
  chain verified, for %s or %d connections: connections per second and the server's CPU per
  connection. On two cores the client's own handshake work (the key exchange and two signature
  verifications) limits the rate; the CPU per connection is the server's alone.

A row's TLS cost is its CPU per request (or per connection) with TLS less the same server's
without, over the whole run (the per-round figures show the spread), each run's CPU less what the
server spends idle over the same time (its timers, health probes, collector: read with no load
for %s before and after the rounds, all rows at once). Without that correction a row run at a
lower rate, as every TLS row is, would be charged more of its idle CPU per request. The tables of
the rows show the CPU as read. The targets: the gateway's TLS cost per request and per full
handshake within 10 %% of the bare proxy's.

`, res.kaConns, b.opts.duration, res.hsWorkers, b.opts.duration, res.hsLimit, b.opts.duration)
	w("## Keep-alive\n\n")
	w("| row | req/s (median) | p99 (median) | server CPU per request | reads and writes per request |\n|---|---:|---:|---:|---:|\n")
	for _, r := range b.rows {
		if r.skip != "" {
			w("| %s | skipped: %s | | | |\n", r.label(), oneLine(r.skip))
			continue
		}
		cpu, n, rps, p99, good := pooledKA(res.ka[r.id])
		if len(rps) == 0 {
			w("| %s | – | – | – | – |\n", r.label())
			continue
		}
		c := "–"
		if good {
			c = fmt.Sprintf("%.1f µs", usPer(cpu, n))
		}
		var sc int64
		for _, m := range res.ka[r.id] {
			if m != nil {
				sc += m.Syscalls
			}
		}
		w("| %s | %.0f | %s | %s | %.2f |\n", r.label(), medianOf(rps), ms(time.Duration(medianOf(p99))), c, float64(sc)/float64(max(n, 1)))
	}
	w("\n## New connections (a full handshake each)\n\n")
	w("| row | connections/s (median) | server CPU per connection |\n|---|---:|---:|\n")
	for _, r := range b.rows {
		if r.skip != "" {
			continue
		}
		cpu, n, rate, good := pooledHS(res.hs[r.id])
		if len(rate) == 0 {
			w("| %s | – | – |\n", r.label())
			continue
		}
		c := "–"
		if good {
			c = fmt.Sprintf("%.1f µs", usPer(cpu, n))
		}
		w("| %s | %.0f | %s |\n", r.label(), medianOf(rate), c)
	}
	if len(res.idle) > 0 {
		var idle []string
		for _, r := range b.rows {
			if v, ok := res.idle[r.id]; ok {
				idle = append(idle, fmt.Sprintf("%s %.1f ms", r.label(), v*1000))
			}
		}
		w("\nIdle CPU a second (no load, the mean of the readings before and after the rounds): %s.\n", strings.Join(idle, "; "))
	}
	w("\n## TLS cost (the TLS row less the plain row, idle CPU subtracted)\n\n")
	w("| server | CPU per request | by round | CPU per full handshake | by round |\n|---|---:|---|---:|---|\n")
	costs := map[string][2]tlsCost{}
	for _, p := range tlsPairs {
		ka, hs := res.kaCost(p[0], p[1]), res.hsCost(p[0], p[1])
		costs[p[0]] = [2]tlsCost{ka, hs}
		if !ka.ok && !hs.ok {
			continue
		}
		cell := func(c tlsCost) (string, string) {
			if !c.ok {
				return "–", ""
			}
			return fmt.Sprintf("%.1f µs", c.whole), roundList(c.byRound)
		}
		a, ar := cell(ka)
		h, hr := cell(hs)
		name, _ := strings.CutSuffix(rowLabel(p[1]), ", TLS")
		w("| %s | %s | %s | %s | %s |\n", name, a, ar, h, hr)
	}
	w("\n## Targets\n\n")
	g, bare := costs[rowGateway], costs[rowBare]
	target := func(what string, gc, bc tlsCost) {
		if !gc.ok || !bc.ok {
			w("- %s: not measured.\n", what)
			return
		}
		if bc.whole <= 0 {
			w("- %s: the gateway's %.1f µs against the bare proxy's %.1f µs: no ratio, the bare proxy's cost is below what this run resolves (see the rounds).\n",
				what, gc.whole, bc.whole)
			return
		}
		ratio := gc.whole / bc.whole
		w("- %s: the gateway's %.1f µs against the bare proxy's %.1f µs, %.2f× (%s).\n", what, gc.whole, bc.whole, ratio,
			verdict(ratio <= 1.10))
	}
	target("TLS cost per request, within 10 % of the bare proxy's", g[0], bare[0])
	target("TLS cost per full handshake, within 10 % of the bare proxy's", g[1], bare[1])
	if len(res.profiles) > 0 {
		w("\nCPU profiles of the gateway rows under each load, taken after the rounds into -tls-profile: %s.\n", strings.Join(res.profiles, ", "))
	}
	if len(res.notes) > 0 {
		w("\n## Notes\n\n")
		for _, n := range res.notes {
			w("- %s\n", n)
		}
	}
	return sb.String()
}
