package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"vendorgate/bench/internal/childproc"
	"vendorgate/shared/testredis"
)

// Row ids, in the order of the table.
const (
	rowBackend      = "backend"
	rowBare         = "bare"
	rowGateway      = "gateway"
	rowGatewayRedis = "gateway-redis"
	rowBaseline     = "baseline" // the gateway of -baseline REF, in-process limiter
	rowNginx        = "nginx"
	rowHAProxy      = "haproxy"
)

// rowLabel is the row's name in the table, numbered as in issue 7.
func rowLabel(id string) string {
	switch id {
	case rowBackend:
		return "1 backend direct"
	case rowBare:
		return "2 bare fasthttp proxy"
	case rowGateway:
		return "3 vendorgate, in-process limiter"
	case rowBaseline:
		return "3b vendorgate at -baseline, in-process limiter"
	case rowGatewayRedis:
		return "4 vendorgate, Redis limiter"
	case rowNginx:
		return "5 nginx proxy_pass"
	case rowHAProxy:
		return "6 HAProxy stick-table limit"
	case rowGatewayRedisBase:
		return "4b vendorgate, Redis limiter, -baseline-gateway"
	}
	if l, ok := leaseRowLabel(id); ok {
		return l
	}
	if l, ok := tlsRowLabel(id); ok {
		return l
	}
	return id
}

func allRows() []string {
	return slices.Concat([]string{rowBackend, rowBare, rowGateway, rowBaseline, rowGatewayRedis}, leaseRows(), policyRows(), []string{rowNginx, rowHAProxy})
}

// row is one thing measured: a URL, the processes behind it, or the reason
// it was skipped.
type row struct {
	id    string
	url   string
	procs []*childproc.Proc
	// main is the process whose RSS is reported (the gateway), admin its
	// admin listener.
	main  *childproc.Proc
	admin string
	// pprof serves /debug/pprof/ when not empty: the admin listener, or
	// the bare proxy's under -tls-profile.
	pprof string
	redis *testredis.Server
	skip  string
}

func (r *row) label() string { return rowLabel(r.id) }

func (r *row) stop() {
	for i := len(r.procs) - 1; i >= 0; i-- {
		r.procs[i].Stop(5 * time.Second)
	}
	if r.redis != nil {
		r.redis.Close()
	}
}

// startBareProxy re-executes this binary as the bare fasthttp proxy, with
// extra environment (its certificate, -tls).
func (b *bench) startBareProxy(extraEnv ...string) (*row, error) {
	r := &row{id: rowBare}
	addr, err := childproc.FreeAddr()
	if err != nil {
		return nil, err
	}
	name := "bareproxy"
	for _, e := range extraEnv {
		if strings.HasPrefix(e, envTLSCert+"=") {
			name = "bareproxy-tls"
		}
	}
	p, err := childproc.Start(b.dir, name, append([]string{envRole + "=" + roleBareProxy, envListen + "=" + addr,
		envUpstream + "=" + b.backendAddr}, extraEnv...), b.self)
	if err != nil {
		return nil, err
	}
	r.procs = append(r.procs, p)
	r.url = "http://" + addr + mePath
	for _, e := range extraEnv {
		if a, ok := strings.CutPrefix(e, envPprof+"="); ok {
			r.pprof = a
		}
	}
	return r, p.WaitTCP(addr, 10*time.Second)
}

// gatewayConfig keeps the limiter on every request but never denying, and
// the access log (one line per request at info) off. The flood vendor alone
// may send one request an hour: the vendor far over its limit.
func gatewayConfig(floodVendor string, policies ...string) string {
	return `# loadbench: limits high enough never to deny, so the limiter is
# exercised on every request without refusing any; one vendor, the flood
# row's, is allowed one request an hour.
limits:
  vendor:
    reads:  {rate: 100000000, period: 1m}
    orders: {rate: 100000000, period: 1m}
  overrides:
    "` + floodVendor + `":
      reads:  {rate: 1, period: 1h}
      orders: {rate: 1, period: 1h}
` + strings.Join(policies, "") + `log_level: warn
`
}

// startBaselineGateway starts -baseline-gateway with Redis limiting.
func (b *bench) startBaselineGateway() (*row, error) {
	abs, err := filepath.Abs(b.opts.baselineGateway)
	if err == nil {
		_, err = os.Stat(abs)
	}
	if err != nil {
		return &row{id: rowGatewayRedisBase, skip: "-baseline-gateway: " + err.Error()}, nil
	}
	return b.startGatewayBin(rowGatewayRedisBase, abs, true)
}

// startGateway starts the vendorgate gateway, with Redis limiting when
// withRedis.
func (b *bench) startGateway(id string, withRedis bool) (*row, error) {
	bin, skip := b.gatewayBin, b.gatewaySkip
	if id == rowBaseline {
		bin, skip = b.baselineBin, b.baselineSkip
	}
	if bin == "" {
		return &row{id: id, skip: skip}, nil
	}
	return b.startGatewayBin(id, bin, withRedis)
}

// startGatewayBin starts gateway binary bin as row id.
func (b *bench) startGatewayBin(id, bin string, withRedis bool) (*row, error) {
	return b.startGatewayConfig(id, bin, withRedis, gatewayConfig(b.floodVendor, rowPolicies(id))+leaseSettings(id))
}

// startGatewayConfig starts gateway binary bin as row id with configuration
// cfg and extra environment.
func (b *bench) startGatewayConfig(id, bin string, withRedis bool, cfg string, extraEnv ...string) (*row, error) {
	r := &row{id: id}
	cfgPath := filepath.Join(b.dir, id+".yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	redisURL := ""
	if withRedis {
		rs, err := startRedis(b.dir)
		if err != nil {
			r.skip = err.Error()
			return r, nil
		}
		r.redis = rs
		redisURL = rs.URL()
	}
	addr, err := childproc.FreeAddr()
	if err != nil {
		return nil, err
	}
	admin, err := childproc.FreeAddr()
	if err != nil {
		return nil, err
	}
	env := []string{
		"GATEWAY_LISTEN=" + addr,
		"GATEWAY_ADMIN_LISTEN=" + admin,
		"GATEWAY_BACKEND_URL=http://" + b.backendAddr,
		"GATEWAY_INTERNAL_TOKEN=" + b.token,
		"GATEWAY_KEY_SIGNING_SECRETS=" + b.signing,
		"GATEWAY_REDIS_URL=" + redisURL,
		"GATEWAY_LOG_LEVEL=warn",
		"GATEWAY_MAX_CONNS_PER_PEER=100000", // the load comes from one loopback address
		"GATEWAY_MAX_NEW_CONNS_PER_PEER=100000",
	}
	env = append(env, extraEnv...)
	if b.opts.sweepPushedTTL > 0 {
		env = append(env, "GATEWAY_KEY_CACHE_PUSHED_TTL="+b.opts.sweepPushedTTL.String())
	}
	if b.opts.sweepMemLimit != "" {
		env = append(env, "GOMEMLIMIT="+b.opts.sweepMemLimit)
	}
	if b.opts.sweepHeap != "" { // the admin listener's /debug/pprof/ answers with it
		env = append(env, "GATEWAY_ADMIN_TOKEN="+heapToken)
	}
	p, err := childproc.Start(b.dir, id, env, bin, "-config", cfgPath)
	if err != nil {
		r.stop()
		r.skip = err.Error()
		return r, nil
	}
	r.procs = append(r.procs, p)
	r.main, r.admin, r.pprof = p, admin, admin
	r.url = "http://" + addr + mePath
	if err := p.WaitTCP(addr, 15*time.Second); err != nil {
		r.stop()
		r.skip = err.Error()
	}
	return r, nil
}

// nginxConfig: proxy_pass to an upstream block with keep-alive, the setup
// an SRE would reach for; access log off like the gateway's.
const nginxConfig = `worker_processes auto;
daemon off;
pid {{DIR}}/nginx.pid;
error_log {{DIR}}/nginx-error.log warn;
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
    listen {{LISTEN}};
    location / {
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
`

func (b *bench) startNginx() (*row, error) {
	return b.startProxy(rowNginx, "nginx", "nginx.conf", nginxConfig, func(conf string) []string {
		return []string{"-e", filepath.Join(b.dir, "nginx-error.log"), "-p", b.dir, "-c", conf}
	})
}

// haproxyConfig: a per-key request-rate limit in a stick table (the
// threshold is never reached) and server-side connection reuse.
const haproxyConfig = `global
  maxconn 4096
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
frontend fe
  bind {{LISTEN}}
  stick-table type string len 64 size 100k expire 60s store http_req_rate(60s)
  http-request track-sc0 req.hdr(X-API-Key)
  http-request deny deny_status 429 if { sc_http_req_rate(0) gt 1000000000 }
  default_backend be
backend be
  http-reuse always
  server s1 {{BACKEND}}
`

func (b *bench) startHAProxy() (*row, error) {
	return b.startProxy(rowHAProxy, "haproxy", "haproxy.cfg", haproxyConfig, func(conf string) []string {
		return []string{"-db", "-f", conf}
	})
}

// startProxy starts the proxy of Debian package pkg (its binary of the
// same name) on a free address with its configuration template filled in
// ({{DIR}}, {{BACKEND}}, {{LISTEN}}) and written to DIR/confName; args are
// its arguments given that file.
func (b *bench) startProxy(id, pkg, confName, template string, args func(conf string) []string) (*row, error) {
	r := &row{id: id}
	bin, note := b.tool(pkg, pkg)
	if bin == "" {
		r.skip = note
		return r, nil
	}
	addr, err := childproc.FreeAddr()
	if err != nil {
		return nil, err
	}
	conf := strings.NewReplacer("{{DIR}}", b.dir, "{{BACKEND}}", b.backendAddr, "{{LISTEN}}", addr).Replace(template)
	path := filepath.Join(b.dir, confName)
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	p, err := childproc.Start(b.dir, id, nil, bin, args(path)...)
	if err != nil {
		r.skip = err.Error()
		return r, nil
	}
	r.procs = append(r.procs, p)
	r.url = "http://" + addr + mePath
	if err := p.WaitTCP(addr, 10*time.Second); err != nil {
		r.stop()
		r.procs = nil
		r.skip = err.Error()
	}
	return r, nil
}

// tool finds bin, installing Debian package pkg when it is missing and
// installs are allowed. It returns "" and a note when it cannot.
func (b *bench) tool(bin, pkg string) (string, string) {
	if p, err := exec.LookPath(bin); err == nil {
		return p, ""
	}
	if !b.opts.install {
		return "", bin + " not installed (apt-get install -y " + pkg + "; -install=false)"
	}
	fmt.Fprintf(b.progress, "installing %s (apt-get install -y %s)\n", bin, pkg)
	install := func() error {
		cmd := exec.Command("apt-get", "install", "-y", "-qq", "--no-install-recommends", pkg)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, lastLine(out))
		}
		return nil
	}
	if err := install(); err != nil {
		_ = exec.Command("apt-get", "update", "-qq").Run()
		if err := install(); err != nil {
			return "", fmt.Sprintf("%s could not be installed (apt-get install -y %s: %v)", bin, pkg, err)
		}
	}
	p, err := exec.LookPath(bin)
	if err != nil {
		return "", bin + " not found after installing " + pkg
	}
	return p, ""
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// check sends one request through the row and wants the responder's exact
// answer: a row that answers 401 or 429 would be measuring its refusals.
func (b *bench) check(r *row) error {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(r.url)
	req.Header.Set("X-API-Key", b.one.keys[0])
	var err error
	for i := 0; i < 50; i++ { // a proxy may listen a moment before it serves
		if err = fasthttp.DoTimeout(req, resp, 5*time.Second); err == nil && resp.StatusCode() == fasthttp.StatusOK {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", r.label(), err)
	}
	if resp.StatusCode() != fasthttp.StatusOK || !bytes.Equal(resp.Body(), b.meBody) {
		return fmt.Errorf("%s answered %d %q, want 200 with the responder's body", r.label(), resp.StatusCode(), resp.Body())
	}
	return nil
}

// primeKeys sends one request with each of keys through r so that the
// gateway resolves and caches every one, with conc requests in flight.
func primeKeys(url string, keys []string, conc int) error {
	c := &fasthttp.Client{MaxConnsPerHost: conc, NoDefaultUserAgentHeader: true}
	work := make(chan string)
	errs := make(chan error, conc)
	for i := 0; i < conc; i++ {
		go func() {
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			var first error
			for k := range work {
				if first != nil {
					continue
				}
				// A 503 (the Redis limiter past its timeout on a busy
				// machine, its breaker open for a while) is tried again
				// for a few seconds: it says nothing of the key.
				for try := 0; try < 50; try++ {
					req.Reset()
					req.SetRequestURI(url)
					req.Header.Set("X-API-Key", k)
					if err := c.DoTimeout(req, resp, 10*time.Second); err != nil {
						first = err
					} else if resp.StatusCode() != fasthttp.StatusOK {
						first = errors.New("status " + strconv.Itoa(resp.StatusCode()) + ": " + string(resp.Body()))
					} else {
						first = nil
					}
					if resp.StatusCode() != fasthttp.StatusServiceUnavailable {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
			errs <- first
		}()
	}
	for _, k := range keys {
		work <- k
	}
	close(work)
	var first error
	for i := 0; i < conc; i++ {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// metricValue sums the samples of a Prometheus counter on the admin
// listener's /metrics (all label sets).
func metricValue(admin, name string) (float64, error) {
	by, err := metricByLabel(admin, name, "")
	if err != nil {
		return 0, err
	}
	return by[""], nil
}

// metricByLabel sums the samples of a Prometheus counter on the admin
// listener's /metrics by the value of one label ("" sums them all).
func metricByLabel(admin, name, label string) (map[string]float64, error) {
	status, body, err := fasthttp.GetTimeout(nil, "http://"+admin+"/metrics", 5*time.Second)
	if err != nil {
		return nil, err
	}
	if status != fasthttp.StatusOK {
		return nil, fmt.Errorf("GET /metrics: status %d", status)
	}
	out := map[string]float64{}
	found := false
	for _, line := range strings.Split(string(body), "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		labels := ""
		if rest[0] == '{' {
			end := strings.LastIndexByte(rest, '}')
			if end < 0 {
				continue
			}
			labels, rest = rest[1:end], rest[end+1:]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return nil, fmt.Errorf("metric line %q: %w", line, err)
		}
		key := ""
		if label != "" {
			for _, kv := range strings.Split(labels, ",") {
				if k, val, ok := strings.Cut(kv, "="); ok && k == label {
					key = strings.Trim(val, `"`)
				}
			}
		}
		out[key] += v
		found = true
	}
	if !found {
		return nil, fmt.Errorf("no %s on /metrics", name)
	}
	return out, nil
}
