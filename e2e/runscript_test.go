package e2e

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"vendorgate/shared/testredis"
)

// runScript runs scripts/run.sh (make run) on free ports and a database in
// dir with extra environment, until its banner is out; it returns the
// banner and the environment vendorctl needs, and stops it at cleanup.
func runScript(t *testing.T, dir string, extra map[string]string) (banner string, ctlEnv []string) {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	port := func() string { return "127.0.0.1:" + strconv.Itoa(testredis.FreePort(t)) }
	listen, admin, gw, gwAdmin := port(), port(), port(), port()
	env := map[string]string{
		"BIN_DIR": binDir, "BACKEND_LISTEN": listen, "BACKEND_ADMIN_LISTEN": admin,
		"BACKEND_DATABASE": filepath.Join(dir, "vg.db"), "BACKEND_REPORTS_DIR": filepath.Join(dir, "reports"),
		"GATEWAY_LISTEN": gw, "GATEWAY_ADMIN_LISTEN": gwAdmin, "GATEWAY_BACKEND_URL": "http://" + listen,
		"GATEWAY_PUBLIC_BASE_URL": "http://" + gw, "BACKEND_PUBLIC_BASE_URL": "http://" + gw,
	}
	for k, v := range extra {
		env[k] = v
	}
	cmd := exec.Command("bash", filepath.Join(root, "scripts", "run.sh"))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "VENDORCTL_") && !strings.HasPrefix(kv, "GATEWAY_") && !strings.HasPrefix(kv, "BACKEND_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
		}
	})
	lines := make(chan string)
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_ = cmd.Wait()
	}()
	var b strings.Builder
	timeout := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("run.sh ended before its banner:\n%s", b.String())
			}
			b.WriteString(l + "\n")
			if strings.HasPrefix(l, "Ctrl-C stops both.") {
				go func() {
					for range lines {
					}
				}()
				ctl := append(os.Environ(), "VENDORCTL_ADMIN_URL=http://"+admin, "VENDORCTL_ADMIN_TOKEN=dev-admin-token-change-me")
				return b.String(), ctl
			}
		case <-timeout:
			t.Fatalf("no banner from run.sh within 60s:\n%s", b.String())
		}
	}
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
	dir := t.TempDir()
	var orderIDs []string
	// 250ms: the binaries are built with -race (as in newStack).
	for run, extra := range []map[string]string{nil, {"GATEWAY_REDIS_URL": testredis.Start(t).URL(), "GATEWAY_REDIS_TIMEOUT": "250ms"}} {
		banner, ctl := runScript(t, dir, extra)
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
	}
	if orderIDs[0] == orderIDs[1] {
		t.Errorf("the second run's order line answered the first run's order %s", orderIDs[0])
	}
}
