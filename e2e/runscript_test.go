package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"vendorgate/shared/testcert"
	"vendorgate/shared/testlog"
	"vendorgate/shared/testredis"
)

// scriptRun is one scripts/run.sh (make run) started by a test.
type scriptRun struct {
	cmd    *exec.Cmd
	env    map[string]string // the addresses and database it was given
	done   chan struct{}     // closed when it has exited
	err    error             // its exit, once done is closed
	stdout testlog.Buffer
	stderr testlog.Buffer
}

// scriptEnv is run.sh's environment for a stack on free ports with its
// database in dir: only the listen addresses, so that every URL it passes
// on or prints is its own derivation.
func scriptEnv(t *testing.T, dir string, extra map[string]string) map[string]string {
	port := func() string { return "127.0.0.1:" + strconv.Itoa(testredis.FreePort(t)) }
	env := map[string]string{
		"BIN_DIR": binDir, "BACKEND_LISTEN": port(), "BACKEND_ADMIN_LISTEN": port(),
		"BACKEND_DATABASE": filepath.Join(dir, "vg.db"), "BACKEND_REPORTS_DIR": filepath.Join(dir, "reports"),
		"GATEWAY_LISTEN": port(), "GATEWAY_ADMIN_LISTEN": port(),
	}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

// startScript starts run.sh with env (and none of the caller's VENDORCTL_,
// GATEWAY_ or BACKEND_ variables); it is stopped at cleanup.
func startScript(t *testing.T, env map[string]string) *scriptRun {
	t.Helper()
	return startScriptIn(t, env, false)
}

// startScriptIn is startScript; with group, run.sh leads a process group of
// its own, as a shell's foreground job does, so that a test can signal the
// whole group as a terminal's Ctrl-C does.
func startScriptIn(t *testing.T, env map[string]string, group bool) *scriptRun {
	t.Helper()
	return startScriptFile(t, "run.sh", env, group)
}

// startScriptFile is startScriptIn for any script under scripts/, with
// its arguments.
func startScriptFile(t *testing.T, script string, env map[string]string, group bool, args ...string) *scriptRun {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	r := &scriptRun{env: env, done: make(chan struct{})}
	r.cmd = exec.Command("bash", append([]string{filepath.Join(root, "scripts", script)}, args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "VENDORCTL_") && !strings.HasPrefix(kv, "GATEWAY_") && !strings.HasPrefix(kv, "BACKEND_") {
			r.cmd.Env = append(r.cmd.Env, kv)
		}
	}
	for k, v := range env {
		r.cmd.Env = append(r.cmd.Env, k+"="+v)
	}
	r.cmd.Stderr = io.MultiWriter(os.Stderr, &r.stderr)
	r.cmd.Stdout = &r.stdout
	if group {
		r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		r.err = r.cmd.Wait()
		close(r.done)
	}()
	t.Cleanup(func() {
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
			_ = r.cmd.Process.Kill()
		}
	})
	return r
}

// banner waits for run.sh's banner and returns its output up to there;
// it fails the test when the script ends first.
func (r *scriptRun) banner(t *testing.T) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if out, ok := upTo(r.stdout.String(), "Ctrl-C stops both."); ok {
			return out
		}
		select {
		case <-r.done:
			t.Fatalf("run.sh ended (%v) before its banner:\n%s\nstderr:\n%s", r.err, r.stdout.String(), r.stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("no banner from run.sh within 60s:\n%s", r.stdout.String())
	return ""
}

// exit waits for run.sh to end by itself and returns its exit code and
// what it printed on both streams.
func (r *scriptRun) exit(t *testing.T, within time.Duration) (int, string) {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(within):
		t.Fatalf("run.sh still running after %v:\n%s", within, r.stdout.String())
	}
	code := 0
	if ee, isExit := r.err.(*exec.ExitError); isExit {
		code = ee.ExitCode()
	} else if r.err != nil {
		t.Fatalf("run.sh: %v", r.err)
	}
	return code, r.stdout.String() + r.stderr.String()
}

// stop ends run.sh as Ctrl-C does and waits for it: it exits 0.
func (r *scriptRun) stop(t *testing.T) {
	t.Helper()
	_ = r.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("run.sh still running 30s after SIGINT")
	}
	if r.err != nil {
		t.Errorf("run.sh stopped by SIGINT: %v, want exit 0", r.err)
	}
}

// ctlEnv is the environment vendorctl needs against the run's backend.
func (r *scriptRun) ctlEnv() []string {
	return append(os.Environ(), "VENDORCTL_ADMIN_URL=http://"+r.env["BACKEND_ADMIN_LISTEN"], "VENDORCTL_ADMIN_TOKEN=dev-admin-token-change-me")
}

// upTo returns what out holds up to and including its first whole line
// that starts with prefix, once there is one.
func upTo(out, prefix string) (string, bool) {
	for i := 0; i < len(out); {
		j := strings.IndexByte(out[i:], '\n')
		if j < 0 {
			return "", false
		}
		if strings.HasPrefix(out[i:], prefix) {
			return out[:i+j+1], true
		}
		i += j + 1
	}
	return "", false
}

var (
	bannerKey  = regexp.MustCompile(`X-API-Key: (\S+)' -H 'Content-Type`)
	bannerIdem = regexp.MustCompile(`Idempotency-Key: ([^']+)'`)
	bannerURL  = regexp.MustCompile(`(http://\S+/api/vendor/v1/orders)\n`)
	bannerBody = regexp.MustCompile(`-d '(\{[^']+\})'`)
)

// TestMakeRunBanner: the make run banner says where vendorctl's tokens
// are (and they work), its order line places a new order on every run
// rather than answering the previous run's, and with GATEWAY_REDIS_URL the
// backend publishes revocations on that Redis, so a revocation is
// immediate, as the banner and vendorctl say.
func TestMakeRunBanner(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var orderIDs []string
	// 250ms: the binaries are built with -race (as in newStack).
	for run, extra := range []map[string]string{nil, {"GATEWAY_REDIS_URL": testredis.Start(t).URL(), "GATEWAY_REDIS_TIMEOUT": "250ms"}} {
		// One run after the other on the same database, as a user would:
		// the second may not open the first one's database while it runs.
		sr := startScript(t, scriptEnv(t, dir, extra))
		banner, ctl := sr.banner(t), sr.ctlEnv()
		defer sr.stop(t)
		for _, want := range []string{"VENDORCTL_ADMIN_TOKEN='dev-admin-token-change-me'", "VENDORCTL_GATEWAY_ADMIN_TOKEN='dev-gateway-admin-token-change-me'",
			"the admin_token settings of", "config/examples/backend.yaml (the backend's)"} {
			if !strings.Contains(banner, want) {
				t.Errorf("run %d: the banner does not say %q:\n%s", run, want, banner)
			}
		}
		key, idem, url, body := bannerKey.FindStringSubmatch(banner), bannerIdem.FindStringSubmatch(banner),
			bannerURL.FindStringSubmatch(banner), bannerBody.FindStringSubmatch(banner)
		if key == nil || idem == nil || url == nil || body == nil {
			t.Fatalf("run %d: no order curl line in the banner:\n%s", run, banner)
		}
		r := do(t, "POST", url[1], key[1], []byte(body[1]), map[string]string{"Idempotency-Key": idem[1]})
		for tries := 0; r.status == 503 && tries < 50; tries++ { // the limiter's first Redis probe
			time.Sleep(100 * time.Millisecond)
			r = do(t, "POST", url[1], key[1], []byte(body[1]), map[string]string{"Idempotency-Key": idem[1]})
		}
		if r.status != 202 {
			t.Fatalf("run %d: the banner's order line answers %d %s", run, r.status, r.body)
		}
		var o order
		decode(t, string(r.body), &o)
		orderIDs = append(orderIDs, o.OrderID)

		cmd := exec.Command(filepath.Join(binDir, "vendorctl"), "-o", "json", "vendor", "list")
		cmd.Env = ctl
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("run %d: vendorctl with the banner's token: %v %s", run, err, out)
		}
		if run == 1 {
			if !strings.Contains(banner, "refused at once") {
				t.Errorf("with GATEWAY_REDIS_URL the banner does not say revocation is at once:\n%s", banner)
			}
			var keys []struct {
				KeyID     string  `json:"key_id"`
				RevokedAt *string `json:"revoked_at"`
			}
			var vendors []struct {
				VendorID string `json:"vendor_id"`
			}
			cmd := exec.Command(filepath.Join(binDir, "vendorctl"), "-o", "json", "vendor", "list")
			cmd.Env = ctl
			out, _ := cmd.Output()
			decode(t, string(out), &vendors)
			cmd = exec.Command(filepath.Join(binDir, "vendorctl"), "-o", "json", "key", "list", vendors[0].VendorID)
			cmd.Env = ctl
			out, _ = cmd.Output()
			decode(t, string(out), &keys)
			last := keys[len(keys)-1].KeyID
			cmd = exec.Command(filepath.Join(binDir, "vendorctl"), "key", "revoke", last)
			cmd.Env = ctl
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "Every gateway refuses this key now") {
				t.Errorf("revoke under make run with GATEWAY_REDIS_URL: %v\n%s", err, out)
			}
		} else if !strings.Contains(banner, "within the gateway's key_cache.ttl") {
			t.Errorf("without Redis the banner does not say revocation waits for the cache TTL:\n%s", banner)
		}
		t.Logf("run %d banner:\n%s", run, banner)
		sr.stop(t)
	}
	if orderIDs[0] == orderIDs[1] {
		t.Errorf("the second run's order line answered the first run's order %s", orderIDs[0])
	}
}

// TestMakeRunOwnsItsStack: make run derives every address it passes on or
// prints from the listen addresses it was given (the banner's curl lines
// reach its own gateway, whose backend URL and public base URL are its
// own), refuses to start a second stack on a port that answers already or
// on the first one's database, naming what is in use and never printing a
// banner, and exits non-zero when one of its processes stops on its own.
func TestMakeRunOwnsItsStack(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first := startScript(t, scriptEnv(t, dir, nil))
	banner := first.banner(t)
	gw := first.env["GATEWAY_LISTEN"]
	_, gwPort, _ := strings.Cut(gw, ":")
	public := "http://localhost:" + gwPort
	if !strings.Contains(banner, "gateway on "+public+" (proxying to http://"+first.env["BACKEND_LISTEN"]+")") {
		t.Errorf("the banner does not name the gateway and backend it was given (%s, %s):\n%s", gw, first.env["BACKEND_LISTEN"], banner)
	}
	if strings.Contains(banner, ":8080") || strings.Contains(banner, ":8081") || strings.Contains(banner, ":8082") {
		t.Errorf("the banner names a default port although every listen address was moved:\n%s", banner)
	}
	key, idem, url, body := bannerKey.FindStringSubmatch(banner), bannerIdem.FindStringSubmatch(banner),
		bannerURL.FindStringSubmatch(banner), bannerBody.FindStringSubmatch(banner)
	if key == nil || idem == nil || url == nil || body == nil {
		t.Fatalf("no order curl line in the banner:\n%s", banner)
	}
	if !strings.HasPrefix(url[1], public+"/") {
		t.Errorf("the banner's order line goes to %s, not the gateway it started (%s)", url[1], public)
	}
	r := do(t, "POST", url[1], key[1], []byte(body[1]), map[string]string{"Idempotency-Key": idem[1]})
	if r.status != 202 {
		t.Fatalf("the banner's order line answers %d %s", r.status, r.body)
	}
	var o order
	decode(t, string(r.body), &o)
	if !strings.HasPrefix(o.Poll.URL, public+"/api/vendor/v1/orders/") || !strings.HasPrefix(r.header.Get("Location"), public+"/") {
		t.Errorf("the order's poll.url %q and Location %q are not on the gateway's address %s", o.Poll.URL, r.header.Get("Location"), public)
	}

	t.Run("same ports", func(t *testing.T) {
		code, out := startScript(t, first.env).exit(t, 30*time.Second)
		if code == 0 || !strings.Contains(out, "port "+gwPort+" (gateway listen") || !strings.Contains(out, "in use") {
			t.Errorf("a second make run on the first one's ports: exit %d, want non-zero naming port %s in use:\n%s", code, gwPort, out)
		}
		if strings.Contains(out, "vendorgate is up") {
			t.Errorf("a second make run that could not start printed the banner:\n%s", out)
		}
	})
	t.Run("same database", func(t *testing.T) {
		env := scriptEnv(t, t.TempDir(), map[string]string{"BACKEND_DATABASE": first.env["BACKEND_DATABASE"]})
		code, out := startScript(t, env).exit(t, 30*time.Second)
		if code == 0 || !strings.Contains(out, "the database "+first.env["BACKEND_DATABASE"]+" is in use") {
			t.Errorf("a second make run on the first one's database: exit %d, want non-zero naming the database:\n%s", code, out)
		}
		if strings.Contains(out, "vendorgate is up") {
			t.Errorf("a second make run that could not start printed the banner:\n%s", out)
		}
	})
	t.Run("a process stops", func(t *testing.T) {
		// The backend is the run's child whose command line names its config.
		children, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", first.cmd.Process.Pid, first.cmd.Process.Pid))
		if err != nil {
			t.Skipf("cannot list run.sh's children: %v", err)
		}
		killed := false
		for _, f := range strings.Fields(string(children)) {
			cmdline, _ := os.ReadFile("/proc/" + f + "/cmdline")
			if strings.Contains(string(cmdline), "backend.yaml") {
				pid, _ := strconv.Atoi(f)
				if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				killed = true
			}
		}
		if !killed {
			t.Fatalf("no backend among run.sh's children %q", children)
		}
		code, out := first.exit(t, 30*time.Second)
		if code == 0 || !strings.Contains(out, "the backend stopped") {
			t.Errorf("make run after its backend was killed: exit %d, want non-zero saying the backend stopped:\n%s", code, out)
		}
	})
}

// TestMakeRunCtrlC: Ctrl-C in the terminal signals make run's whole
// process group, the gateway and the backend included. That is a stop, not
// a crash: run.sh exits 0, saying neither that a process stopped on its
// own nor anything else on stderr.
func TestMakeRunCtrlC(t *testing.T) {
	t.Parallel()
	for i := 0; i < 3; i++ { // the stop raced the gateway's own exit: more than one try
		sr := startScriptIn(t, scriptEnv(t, t.TempDir(), nil), true)
		sr.banner(t)
		before := len(sr.stderr.String())
		if err := syscall.Kill(-sr.cmd.Process.Pid, syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		code, _ := sr.exit(t, 30*time.Second)
		after := sr.stderr.String()[before:]
		if code != 0 && code != 130 {
			t.Errorf("try %d: Ctrl-C: make run exit %d, want 0 or 130; stderr after the signal:\n%s", i, code, after)
		}
		if strings.Contains(after, "make run:") {
			t.Errorf("try %d: Ctrl-C: make run reported a failure:\n%s", i, after)
		}
	}
}

// TestMakeRunTLS: with GATEWAY_TLS_CERT_FILE and GATEWAY_TLS_KEY_FILE make
// run serves HTTPS and says so: the banner's curl lines are https:// with
// the --cacert that trusts the certificate, and the one for /me, run as
// printed, answers 200; the order's Location and poll.url are https://.
// The banner's reload line, typed as printed, reloads that gateway.
func TestMakeRunTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := testcert.NewCA(t)
	certFile, keyFile := ca.Issue(t, time.Now().Add(time.Hour), "localhost", "127.0.0.1").Write(t, dir, "edge")
	sr := startScript(t, scriptEnv(t, dir, map[string]string{"GATEWAY_TLS_CERT_FILE": certFile, "GATEWAY_TLS_KEY_FILE": keyFile}))
	banner := sr.banner(t)
	_, gwPort, _ := strings.Cut(sr.env["GATEWAY_LISTEN"], ":")
	public := "https://localhost:" + gwPort
	if strings.Contains(banner, "http://localhost:"+gwPort) {
		t.Errorf("the banner names the HTTPS listener with http://:\n%s", banner)
	}
	me := regexp.MustCompile(`(?m)^\s*(curl .*/api/vendor/v1/me)$`).FindStringSubmatch(banner)
	if me == nil || !strings.Contains(me[1], " --cacert ") || !strings.Contains(me[1], public+"/api/vendor/v1/me") {
		t.Fatalf("no https curl line with --cacert for /me in the banner:\n%s", banner)
	}
	out, err := exec.Command("bash", "-c", me[1]+" -w ' status=%{http_code}'").CombinedOutput()
	if err != nil || !strings.HasSuffix(string(out), " status=200") {
		t.Errorf("the banner's /me line: %v\n%s", err, out)
	}

	key, idem, body := bannerKey.FindStringSubmatch(banner), bannerIdem.FindStringSubmatch(banner), bannerBody.FindStringSubmatch(banner)
	if key == nil || idem == nil || body == nil || !strings.Contains(banner, public+"/api/vendor/v1/orders\n") {
		t.Fatalf("no https order line in the banner:\n%s", banner)
	}
	tlsClient := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: ca.ClientConfig("localhost")}}
	req, _ := http.NewRequest("POST", public+"/api/vendor/v1/orders", strings.NewReader(body[1]))
	req.Header.Set("X-API-Key", key[1])
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", idem[1])
	resp, err := tlsClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 202 {
		t.Fatalf("the banner's order over HTTPS: %d %s", resp.StatusCode, b)
	}
	var o order
	decode(t, string(b), &o)
	if !strings.HasPrefix(o.Poll.URL, public+"/") || !strings.HasPrefix(resp.Header.Get("Location"), public+"/") {
		t.Errorf("over HTTPS the order's poll.url %q and Location %q are not on %s", o.Poll.URL, resp.Header.Get("Location"), public)
	}

	reload := regexp.MustCompile(`(?m)^\s*(kill -HUP (\d+))\s.*gateway\.yaml`).FindStringSubmatch(banner)
	if reload == nil {
		t.Fatalf("no reload line (kill -HUP PID, naming the config file) in the banner:\n%s", banner)
	}
	cmdline, _ := os.ReadFile("/proc/" + reload[2] + "/cmdline")
	if !strings.Contains(string(cmdline), "gateway") || !strings.Contains(string(cmdline), "gateway.yaml") {
		t.Fatalf("the reload line's pid %s is not the gateway: %q", reload[2], cmdline)
	}
	before := strings.Count(sr.stderr.String(), `"configuration reloaded"`)
	if out, err := exec.Command("bash", "-c", reload[1]).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v %s", reload[1], err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(sr.stderr.String(), `"configuration reloaded"`) == before {
		if time.Now().After(deadline) {
			t.Fatalf("no reload logged 30s after the banner's reload line:\n%s", sr.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	sr.stop(t)
}
