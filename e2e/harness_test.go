package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"vendorgate/shared/testbuild"
	"vendorgate/shared/testredis"
)

// binDir holds the binaries TestMain builds once for the whole package.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "vendorgate-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	root, err := moduleRoot()
	if err == nil {
		// One go command for the three: it loads the packages once and
		// links the binaries side by side. Always with -race, whatever the
		// test binary's own mode; without DWARF (-ldflags=-w), as make
		// test links the test binaries: a quarter of each link's CPU.
		if berr := testbuild.Build(root, dir, []string{"-race", "-ldflags=-w"}, "./cmd/gateway", "./cmd/backend", "./cmd/vendorctl"); berr != nil {
			err = fmt.Errorf("build the binaries: %v", berr)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	return filepath.Dir(strings.TrimSpace(string(out))), nil
}

const (
	internalToken     = "e2e-internal-token-0123456789"
	signingSecret     = "e2e-key-signing-secret-0123456789abcdef"
	adminToken        = "e2e-admin-token-0123456789ab"
	gatewayAdminToken = "e2e-gateway-admin-token-0123"
)

// proc is one running binary whose output goes to a file that is printed
// when the test fails.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	mu   sync.Mutex
	err  error
	// killed is set when a test killed the process on purpose.
	killed bool
}

func startProc(t *testing.T, name string, env map[string]string, args ...string) *proc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(binDir, name), args...)
	// No second of sleep at each exit (the race runtime's default): the
	// stacks stop and restart their processes often.
	cmd.Env = append(os.Environ(), "GORACE=halt_on_error=1 atexit_sleep_ms=0")
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		f.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		if err := p.stop(t); err != nil && !p.killed {
			t.Errorf("%s did not exit cleanly on SIGTERM: %v", name, err)
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 6000 {
				b = b[len(b)-6000:]
			}
			t.Logf("--- %s log (tail) ---\n%s", name, b)
		}
	})
	return p
}

// stop sends SIGTERM and waits; it reports whether the process exited 0.
func (p *proc) stop(t *testing.T) error {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
			return fmt.Errorf("%s did not stop within 20s of SIGTERM", p.name)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *proc) logText() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// stack is one backend and its gateways.
type stack struct {
	t          *testing.T
	redis      *testredis.Server
	backend    *proc
	backendEnv map[string]string // the backend's environment, to restart it alike
	backendURL string
	adminURL   string
	gateways   []*proc
	gwURLs     []string
	gwAdmin    []string
	dataDir    string
	conf       *conformance
}

type stackOptions struct {
	redis bool
	// persistentRedis makes the Redis durable (survives a kill and restart).
	persistentRedis bool
	// gatewayYAML, when set, is written to a file passed with -config.
	gatewayYAML string
	gateways    int
	// backendHTTPS: the backend's listen serves TLS (backendEnv names its
	// files), and the gateways call https://.
	backendHTTPS bool
	backendEnv   map[string]string
	gatewayEnv   map[string]string
}

func newStack(t *testing.T, o stackOptions) *stack {
	t.Helper()
	s := &stack{t: t, dataDir: t.TempDir()}
	switch {
	case o.persistentRedis:
		s.redis, o.redis = testredis.StartPersistent(t), true
	case o.redis:
		s.redis = testredis.Start(t)
	}
	bport, aport := testredis.FreePort(t), testredis.FreePort(t)
	s.backendURL = "http://127.0.0.1:" + strconv.Itoa(bport)
	if o.backendHTTPS {
		s.backendURL = "https://127.0.0.1:" + strconv.Itoa(bport)
	}
	s.adminURL = "http://127.0.0.1:" + strconv.Itoa(aport)
	if o.gateways == 0 {
		o.gateways = 1
	}
	gwPorts := make([]int, o.gateways)
	for i := range gwPorts {
		gwPorts[i] = testredis.FreePort(t)
	}
	benv := map[string]string{
		"BACKEND_LISTEN":          "127.0.0.1:" + strconv.Itoa(bport),
		"BACKEND_ADMIN_LISTEN":    "127.0.0.1:" + strconv.Itoa(aport),
		"BACKEND_DATABASE":        filepath.Join(s.dataDir, "vendorgate.db"),
		"BACKEND_REPORTS_DIR":     filepath.Join(s.dataDir, "reports"),
		"BACKEND_PUBLIC_BASE_URL": "http://127.0.0.1:" + strconv.Itoa(gwPorts[0]),
		"BACKEND_INTERNAL_TOKEN":  internalToken,
		"BACKEND_ADMIN_TOKEN":     adminToken,
		"BACKEND_SANDBOX_DELAY":   "100ms",
		"BACKEND_SWEEP_INTERVAL":  "100ms",
	}
	benv["BACKEND_KEY_SIGNING_SECRETS"] = signingSecret
	if o.redis {
		benv["BACKEND_REDIS_URL"] = s.redis.URL()
	}
	for k, v := range o.backendEnv {
		benv[k] = v
	}
	s.backendEnv = benv
	s.backend = startProc(t, "backend", benv)
	waitHTTP(t, s.adminURL+"/healthz", s.backend)

	for _, port := range gwPorts {
		admin := "127.0.0.1:" + strconv.Itoa(testredis.FreePort(t))
		genv := map[string]string{
			"GATEWAY_LISTEN":         "127.0.0.1:" + strconv.Itoa(port),
			"GATEWAY_ADMIN_LISTEN":   admin,
			"GATEWAY_BACKEND_URL":    s.backendURL,
			"GATEWAY_INTERNAL_TOKEN": internalToken,
			// The binaries are built with -race and share two cores with
			// the test: 250ms keeps a slow-but-alive Redis from reading as
			// an outage. Outages are still tested (stopped, paused servers).
			"GATEWAY_REDIS_TIMEOUT": "250ms",
			"GATEWAY_ADMIN_TOKEN":   gatewayAdminToken,
		}
		genv["GATEWAY_KEY_SIGNING_SECRETS"] = signingSecret
		if o.redis {
			genv["GATEWAY_REDIS_URL"] = s.redis.URL()
		}
		for k, v := range o.gatewayEnv {
			genv[k] = v
		}
		var args []string
		if o.gatewayYAML != "" {
			path := filepath.Join(t.TempDir(), "gateway.yaml")
			if err := os.WriteFile(path, []byte(o.gatewayYAML), 0o600); err != nil {
				t.Fatal(err)
			}
			args = []string{"-config", path}
		}
		g := startProc(t, "gateway", genv, args...)
		waitHTTP(t, "http://"+admin+"/healthz", g)
		s.gateways = append(s.gateways, g)
		s.gwURLs = append(s.gwURLs, "http://127.0.0.1:"+strconv.Itoa(port))
		s.gwAdmin = append(s.gwAdmin, "http://"+admin)
	}
	s.conf = newConformance(t, s.gwURLs[0])
	return s
}

func waitHTTP(t *testing.T, url string, p *proc) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			t.Fatalf("%s exited before it was ready:\n%s", p.name, p.logText())
		default:
		}
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatalf("%s not ready at %s within 20s", p.name, url)
}

// vendorctl runs the real CLI against the stack's backend and returns stdout.
func (s *stack) vendorctl(args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(binDir, "vendorctl"), args...)
	cmd.Env = append(os.Environ(), "VENDORCTL_ADMIN_URL="+s.adminURL, "VENDORCTL_ADMIN_TOKEN="+adminToken,
		"VENDORCTL_GATEWAY_ADMIN_TOKEN="+gatewayAdminToken)
	if len(s.gwAdmin) > 0 {
		cmd.Env = append(cmd.Env, "VENDORCTL_GATEWAY_ADMIN_URL="+s.gwAdmin[0])
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("vendorctl %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

func (s *stack) mustVendorctl(args ...string) string {
	s.t.Helper()
	out, err := s.vendorctl(args...)
	if err != nil {
		s.t.Fatal(err)
	}
	return out
}

// newVendor creates and approves a vendor with services and issues a key.
func (s *stack) newVendor(env, services string) (vendorID, key string) {
	s.t.Helper()
	var v struct {
		VendorID string `json:"vendor_id"`
	}
	decode(s.t, s.mustVendorctl("-o", "json", "vendor", "create", "--company", "Acme "+env, "--environment", env, "--services", services), &v)
	s.mustVendorctl("vendor", "approve", v.VendorID)
	return v.VendorID, s.issueKey(v.VendorID)
}

func (s *stack) issueKey(vendorID string, extra ...string) string {
	s.t.Helper()
	var k struct {
		Key string `json:"key"`
	}
	decode(s.t, s.mustVendorctl(append([]string{"-o", "json", "key", "issue", vendorID}, extra...)...), &k)
	if k.Key == "" {
		s.t.Fatal("key issue printed no key")
	}
	return k.Key
}

func decode(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("decode %q: %v", s, err)
	}
}

// response is one answer as a vendor sees it.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) errorCode() string {
	var env struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(r.body, &env)
	return env.Error.Code
}

var client = &http.Client{Timeout: 10 * time.Second}

// do sends one request as a vendor would. Every answer from a stack's
// gateway is also validated against the OpenAPI document.
func do(t *testing.T, method, url, key string, body []byte, hdr map[string]string) response {
	t.Helper()
	return doChecked(t, nil, method, url, key, body, hdr)
}

func (s *stack) do(method, url, key string, body []byte, hdr map[string]string) response {
	s.t.Helper()
	return doChecked(s.t, s.conf, method, url, key, body, hdr)
}

func doChecked(t *testing.T, conf *conformance, method, url, key string, body []byte, hdr map[string]string) response {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := response{status: resp.StatusCode, header: resp.Header, body: b}
	if conf != nil {
		conf.check(t, method, url, req.Header, r)
	}
	return r
}
