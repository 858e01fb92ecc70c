// Command edgemem measures what clients without a key cost the gateway in
// memory: it starts a gateway binary in front of a small in-process
// backend, drives one good client at a fixed rate, and opens many
// connections that announce a large body without a key (or send their
// headers one byte a second), keeping that many attempts open for a while,
// then closing them. It reports the gateway's RSS (baseline, peak, after),
// its live heap from the GC trace, and the good client's latency in each
// phase.
//
//	cd bench && go run ./edgemem -conns 1000 -mode headers
//	cd bench && go run ./edgemem -gateway /path/to/other/gateway -conns 1000
//	cd bench && go run ./edgemem -tls -mode stall -conns 1000
//
// -tls serves the public listener over HTTPS with a certificate the tool
// makes; -mode stall opens connections that send the first bytes of a
// ClientHello (with -tls) or of a request head (without) and then nothing.
//
// The attack runs in a process of its own, on the machine's last CPU; the
// gateway, the good client and the backend on the others (-attack-cpus,
// -cpus; both "" to pin nothing).
package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"vendorgate/bench/internal/childproc"
	"vendorgate/bench/internal/product"
	"vendorgate/shared/apikey"
	"vendorgate/shared/wire"
)

const (
	internalToken = "edgemem-internal-token-0123456789"
	signingSecret = "edgemem-key-signing-secret-0123456789abcdef"
	mePath        = "/api/vendor/v1/me"
)

type options struct {
	gateway  string
	conns    int
	peers    int
	mode     string
	body     int
	hold     time.Duration
	after    time.Duration
	baseline time.Duration
	rate     int
	env      string
	reopen   time.Duration
	jitter   time.Duration
	cpus     cpuSets
	tls      bool
}

func main() {
	var o options
	flag.StringVar(&o.gateway, "gateway", "", "gateway binary to measure (default: build ./cmd/gateway of this checkout)")
	flag.IntVar(&o.conns, "conns", 1000, "attack connections kept open at once")
	flag.IntVar(&o.peers, "peers", 250, "loopback source addresses (127.0.0.2 onwards; the good client is 127.0.0.1) the attack connections are spread over")
	flag.StringVar(&o.mode, "mode", "headers", "headers: send the headers of a POST announcing -body bytes at once, and no body; slowbody: then the body one byte a second; slowheaders: the headers one byte a second; stall: the first bytes of a ClientHello (-tls) or of a request head, then nothing")
	flag.BoolVar(&o.tls, "tls", false, "serve the public listener over HTTPS (a certificate made here); the good client speaks TLS")
	flag.IntVar(&o.body, "body", 1<<20, "announced Content-Length of the attack requests")
	flag.DurationVar(&o.hold, "hold", 20*time.Second, "how long the attack connections are kept open (a closed one is opened again)")
	flag.DurationVar(&o.after, "after", 60*time.Second, "observation after the attack connections closed")
	flag.DurationVar(&o.baseline, "baseline", 10*time.Second, "idle observation before the attack")
	flag.IntVar(&o.rate, "rate", 100, "requests a second of the good client")
	flag.DurationVar(&o.reopen, "reopen", time.Second, "pause before a connection the gateway answered or closed is opened again")
	flag.DurationVar(&o.jitter, "jitter", 0, "up to this much more, at random, before each reopen (0: the connections answered together come back together)")
	flag.StringVar(&o.env, "env", "", "extra gateway environment, comma-separated NAME=value")
	def := defaultCPUs()
	flag.StringVar(&o.cpus.attack, "attack-cpus", def.attack, "CPUs of the attack process (taskset list; \"\": not pinned)")
	flag.StringVar(&o.cpus.rest, "cpus", def.rest, "CPUs of the gateway, the good client and the backend (taskset list; \"\": not pinned)")
	flag.Parse()
	if ok, err := runAttackRole(); ok {
		if err != nil {
			fmt.Fprintln(os.Stderr, "edgemem attacker:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "edgemem:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	if o.mode != "headers" && o.mode != "slowbody" && o.mode != "slowheaders" && o.mode != "stall" {
		return fmt.Errorf("-mode %q: headers, slowbody, slowheaders or stall", o.mode)
	}
	raiseFileLimit()
	if err := pinSelf(o.cpus.rest); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "edgemem")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := o.gateway
	if bin == "" {
		root, err := product.Root(ctx)
		if err != nil {
			return err
		}
		if err := product.Build(ctx, root, dir, "gateway"); err != nil {
			return err
		}
		bin = filepath.Join(dir, "gateway")
	}

	signer, err := apikey.NewSigner([]string{signingSecret})
	if err != nil {
		return err
	}
	key, err := signer.Generate(apikey.DefaultPrefixes(), apikey.Sandbox)
	if err != nil {
		return err
	}
	backend, err := startResponder(apikey.Hash(key))
	if err != nil {
		return err
	}
	defer backend.Shutdown()

	addr, err := childproc.FreeAddr()
	if err != nil {
		return err
	}
	admin, err := childproc.FreeAddr()
	if err != nil {
		return err
	}
	conf := filepath.Join(dir, "gateway.yaml")
	// The good client's rate is far above the default read limit: raise it,
	// so that its answers are proxied ones.
	if err := os.WriteFile(conf, []byte("limits:\n  vendor:\n    reads: {rate: 1000000, period: 1m}\n    orders: {rate: 10, period: 1m}\n"), 0o600); err != nil {
		return err
	}
	env := []string{"GATEWAY_LISTEN=" + addr, "GATEWAY_ADMIN_LISTEN=" + admin, "GATEWAY_BACKEND_URL=http://" + backend.addr,
		"GATEWAY_INTERNAL_TOKEN=" + internalToken, "GATEWAY_KEY_SIGNING_SECRETS=" + signingSecret, "GATEWAY_LOG_LEVEL=error",
		"GODEBUG=gctrace=1"}
	scheme, roots := "http", (*x509.CertPool)(nil)
	if o.tls {
		certFile, keyFile, pool, err := writeCertificate(dir)
		if err != nil {
			return err
		}
		env = append(env, "GATEWAY_TLS_CERT_FILE="+certFile, "GATEWAY_TLS_KEY_FILE="+keyFile)
		scheme, roots = "https", pool
	}
	if o.env != "" {
		env = append(env, strings.Split(o.env, ",")...)
	}
	name, args := command(o.cpus.rest, bin, "-config", conf)
	gw, err := childproc.Start(dir, "gateway", env, name, args...)
	if err != nil {
		return err
	}
	defer gw.Stop(5 * time.Second)
	if err := gw.WaitTCP(addr, 20*time.Second); err != nil {
		return fmt.Errorf("gateway did not listen: %w\n%s", err, gw.Tail())
	}
	fmt.Printf("gateway %s (pid %d, %s), %d attack connections over %d source addresses, mode %s, %d-byte body announced; good client %d req/s\n",
		bin, gw.Pid(), scheme, o.conns, o.peers, o.mode, o.body, o.rate)
	if o.cpus != (cpuSets{}) {
		fmt.Printf("CPUs: attack %q, gateway, good client and backend %q\n", o.cpus.attack, o.cpus.rest)
	}

	mon := &monitor{pid: gw.Pid(), log: filepath.Join(dir, "gateway.log")}
	good := &goodClient{url: scheme + "://" + addr + mePath, key: key, rate: o.rate, roots: roots}
	gctx, gstop := context.WithCancel(ctx)
	defer gstop()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); good.run(gctx) }()
	go func() { defer wg.Done(); mon.run(gctx) }()

	phase := func(name string, d time.Duration) phaseFigures {
		good.startPhase()
		mon.startPhase()
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
		return phaseFigures{name: name, lat: good.endPhase(), mem: mon.endPhase()}
	}
	warm := phase("warm-up", 3*time.Second)
	_ = warm
	base := phase("baseline", o.baseline)

	atk, err := startAttack(dir, self, o.cpus.attack, attackSettings{Addr: addr, Conns: o.conns, Peers: o.peers, Body: o.body, Mode: o.mode, Reopen: o.reopen, Jitter: o.jitter, TLS: o.tls})
	if err != nil {
		return err
	}
	during := phase("attack", o.hold)
	counts, err := atk.stop()
	if err != nil {
		return err
	}
	after := phase("after", o.after)
	gstop()
	wg.Wait()

	if ctx.Err() != nil {
		return ctx.Err()
	}
	hwm, _ := procStatus(gw.Pid(), "VmHWM:")
	fmt.Printf("\nattack: %d connections opened, %d answered (%s), %d cut without an answer, %d refused at dial\n",
		counts.Opened, counts.Answered, counts.statusList(), counts.Cut, counts.DialFailed)
	fmt.Printf("\n| phase | VmRSS median | VmRSS max | live heap after last GC | GCs | gateway CPU | good p50 | good p99 | good max | good errors |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, p := range []phaseFigures{base, during, after} {
		fmt.Println(p.row())
	}
	fmt.Printf("\npeak RSS over baseline: %.1f MB (VmHWM %.1f MB, baseline median %.1f MB)\n",
		mb(during.mem.rssMax-base.mem.rssMedian), mb(hwm*1024), mb(base.mem.rssMedian))
	fmt.Printf("RSS at the end of \"after\": %.1f MB; live heap: baseline %.1f MB, end %.1f MB (%+.1f %%)\n",
		mb(after.mem.rssLast), mb(base.mem.liveHeap), mb(after.mem.liveHeap),
		100*(float64(after.mem.liveHeap)-float64(base.mem.liveHeap))/float64(max(base.mem.liveHeap, 1)))
	// The attack's cost in the gateway's CPU, per connection: the attack
	// phase's CPU over the baseline's. The attack's own pace depends on the
	// machine; this does less.
	fmt.Printf("attack: %.0f connections a second; gateway CPU per attack connection %.0f µs\n",
		float64(counts.Opened)/o.hold.Seconds(), (during.mem.cpu-base.mem.cpu)*o.hold.Seconds()/float64(max(counts.Opened, 1))*1e6)
	if refused, err := refusedCounts("http://" + admin + "/metrics"); err == nil {
		fmt.Printf("connections refused at accept, failed handshakes: %s\n", refused)
	}
	return nil
}

// refusedCounts is the gateway's vendorgate_gateway_connections_refused_total
// samples, as /metrics prints them.
func refusedCounts(url string) (string, error) {
	var req fasthttp.Request
	var resp fasthttp.Response
	req.SetRequestURI(url)
	if err := fasthttp.DoTimeout(&req, &resp, 5*time.Second); err != nil {
		return "", err
	}
	var out []string
	for _, line := range strings.Split(string(resp.Body()), "\n") {
		if strings.HasPrefix(line, "vendorgate_gateway_connections_refused_total") || strings.HasPrefix(line, "vendorgate_gateway_tls_handshake_failures_total") {
			out = append(out, line)
		}
	}
	return strings.Join(out, ", "), nil
}

func mb(b int64) float64 { return float64(b) / 1e6 }

// raiseFileLimit lifts the soft limit of open files to the hard one: a
// thousand attack connections take as many descriptors in the tool and in
// the gateway (which inherits the limit).
func raiseFileLimit() {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Cur < l.Max {
		l.Cur = l.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}

// responder is the backend: the key lookup of the one good key, and /me.
type responder struct {
	srv  *fasthttp.Server
	addr string
}

func startResponder(hash string) (*responder, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC().Truncate(time.Second)
	res, err := json.Marshal(wire.KeyResolution{KeyID: "00000000-0000-4000-9000-000000000001", VendorID: "00000000-0000-4000-8000-000000000001",
		Environment: apikey.Sandbox, CreatedAt: now, ExpiresAt: now.Add(90 * 24 * time.Hour),
		Vendor: wire.VendorInfo{Status: wire.VendorApproved, CompanyName: "Edge Bench Vendor", EnabledServices: wire.Services()}})
	if err != nil {
		return nil, err
	}
	me := []byte(`{"vendor_id":"00000000-0000-4000-8000-000000000001","company_name":"Edge Bench Vendor","environment":"sandbox"}`)
	r := &responder{addr: ln.Addr().String()}
	r.srv = &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		ctx.Response.Header.Set("Cache-Control", "no-store")
		switch p := string(ctx.Path()); {
		case p == mePath:
			ctx.SetBody(me)
		case p == wire.KeyLookupPath+hash && string(ctx.Request.Header.Peek(wire.HeaderInternalToken)) == internalToken:
			ctx.SetBody(res)
		case p == wire.ReadyPath:
			ctx.SetBodyString(`{"status":"ok","database":"ok"}`)
		default:
			ctx.SetStatusCode(404)
			ctx.SetBodyString(`{"error":{"code":"not_found","message":"not found"}}`)
		}
	}}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

func (r *responder) Shutdown() { _ = r.srv.Shutdown() }

// goodClient sends GET /me at a fixed rate, one request at a time per
// tick, and keeps the latencies of the current phase.
type goodClient struct {
	url, key string
	rate     int
	roots    *x509.CertPool // the gateway's certificate, over TLS
	mu       sync.Mutex
	lat      []time.Duration
	errs     int
}

func (g *goodClient) run(ctx context.Context) {
	c := &fasthttp.Client{MaxConnsPerHost: 16, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
		TLSConfig: &tls.Config{RootCAs: g.roots, ServerName: "127.0.0.1"}}
	tick := time.NewTicker(time.Second / time.Duration(g.rate))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		go func() {
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			req.SetRequestURI(g.url)
			req.Header.Set(wire.HeaderAPIKey, g.key)
			start := time.Now()
			err := c.Do(req, resp)
			d := time.Since(start)
			g.mu.Lock()
			if err != nil || resp.StatusCode() != 200 {
				g.errs++
			} else {
				g.lat = append(g.lat, d)
			}
			g.mu.Unlock()
		}()
	}
}

func (g *goodClient) startPhase() {
	g.mu.Lock()
	g.lat, g.errs = g.lat[:0], 0
	g.mu.Unlock()
}

type latencies struct {
	n             int
	p50, p99, max time.Duration
	errs          int
}

func (g *goodClient) endPhase() latencies {
	g.mu.Lock()
	defer g.mu.Unlock()
	l := latencies{n: len(g.lat), errs: g.errs}
	if len(g.lat) == 0 {
		return l
	}
	s := slices.Clone(g.lat)
	slices.Sort(s)
	l.p50, l.p99, l.max = s[len(s)/2], s[min(len(s)-1, len(s)*99/100)], s[len(s)-1]
	return l
}

// monitor samples the gateway's VmRSS every 100ms and follows its GC trace
// (GODEBUG=gctrace=1 in its log) for the live heap after each GC.
type monitor struct {
	pid int
	log string
	mu  sync.Mutex
	rss []int64
	gcs int
	off int64 // read so far of the log
	// The phase's start, and the gateway's CPU time (clock ticks) then.
	start      time.Time
	startTicks int64
	// live is the live heap after the last GC seen, in bytes.
	live int64
}

type memFigures struct {
	rssMedian, rssMax, rssLast int64
	liveHeap                   int64
	gcs                        int
	// cpu is the gateway's CPU time in the phase over the phase's length
	// (1 = one CPU busy throughout).
	cpu float64
}

var gcLine = regexp.MustCompile(`^gc \d+ @[0-9.]+s [0-9.]+%: .* (\d+)->(\d+)->(\d+) MB, `)

func (m *monitor) run(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		kb, err := procStatus(m.pid, "VmRSS:")
		m.mu.Lock()
		if err == nil {
			m.rss = append(m.rss, kb*1024)
		}
		m.readGCs()
		m.mu.Unlock()
	}
}

// readGCs reads the GC trace lines written since the last call.
func (m *monitor) readGCs() {
	f, err := os.Open(m.log)
	if err != nil {
		return
	}
	defer f.Close()
	if _, err := f.Seek(m.off, io.SeekStart); err != nil {
		return
	}
	sc := bufio.NewScanner(f)
	var read int64
	for sc.Scan() {
		line := sc.Text()
		read += int64(len(line)) + 1
		if g := gcLine.FindStringSubmatch(line); g != nil {
			live, _ := strconv.ParseInt(g[3], 10, 64)
			m.live = live << 20
			m.gcs++
		}
	}
	m.off += read
}

func (m *monitor) startPhase() {
	m.mu.Lock()
	m.rss, m.gcs = m.rss[:0], 0
	m.start = time.Now()
	m.startTicks, _ = cpuTime(m.pid)
	m.mu.Unlock()
}

func (m *monitor) endPhase() memFigures {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := memFigures{liveHeap: m.live, gcs: m.gcs}
	if ticks, err := cpuTime(m.pid); err == nil {
		f.cpu = float64(ticks-m.startTicks) / clockTicks / time.Since(m.start).Seconds()
	}
	if len(m.rss) == 0 {
		return f
	}
	s := slices.Clone(m.rss)
	f.rssLast = s[len(s)-1]
	slices.Sort(s)
	f.rssMedian, f.rssMax = s[len(s)/2], s[len(s)-1]
	return f
}

type phaseFigures struct {
	name string
	lat  latencies
	mem  memFigures
}

func (p phaseFigures) row() string {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }
	return fmt.Sprintf("| %s | %.1f MB | %.1f MB | %.1f MB | %d | %.0f %% | %s | %s | %s | %d of %d |", p.name, mb(p.mem.rssMedian), mb(p.mem.rssMax),
		mb(p.mem.liveHeap), p.mem.gcs, 100*p.mem.cpu, ms(p.lat.p50), ms(p.lat.p99), ms(p.lat.max), p.lat.errs, p.lat.n+p.lat.errs)
}

// procStatus reads a kB field of /proc/PID/status.
func procStatus(pid int, field string) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				return strconv.ParseInt(f[0], 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// writeCertificate makes a self-signed certificate for 127.0.0.1 and
// writes it and its key in dir.
func writeCertificate(dir string) (certFile, keyFile string, pool *x509.CertPool, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "edgemem"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", "", nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", nil, err
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return "", "", nil, err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return "", "", nil, err
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool, nil
}
