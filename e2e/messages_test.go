package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"vendorgate/shared/sandboxvalues"
)

// vendorctlWith runs vendorctl with the stack's settings and env on top; it
// returns stdout, stderr and the exit status.
func (s *stack) vendorctlWith(env map[string]string, args ...string) (string, string, int) {
	s.t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "vendorctl"), args...)
	cmd.Env = append(os.Environ(), "VENDORCTL_ADMIN_URL="+s.adminURL, "VENDORCTL_ADMIN_TOKEN="+adminToken,
		"VENDORCTL_GATEWAY_ADMIN_URL="+s.gwAdmin[0], "VENDORCTL_GATEWAY_ADMIN_TOKEN="+gatewayAdminToken)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		s.t.Fatal(err)
	}
	return stdout.String(), stderr.String(), code
}

// TestOperatorMessagesSayWhatHappened: a token that was sent but is wrong
// is called refused, naming whose token it is (the backend's or the
// gateway's); releasing an order twice says it is not held (409 not_held),
// not request_failed.
func TestOperatorMessagesSayWhatHappened(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})

	_, stderr, code := s.vendorctlWith(map[string]string{"VENDORCTL_ADMIN_TOKEN": "not-the-admin-token-0123"}, "vendor", "list")
	if code != 1 || !strings.Contains(stderr, "refused") || !strings.Contains(stderr, "VENDORCTL_ADMIN_TOKEN") ||
		!strings.Contains(stderr, "backend") || strings.Contains(stderr, "token required") {
		t.Errorf("wrong backend admin token: exit %d, %q", code, stderr)
	}
	_, stderr, code = s.vendorctlWith(map[string]string{"VENDORCTL_GATEWAY_ADMIN_TOKEN": "not-the-gateway-token-0123"}, "usage", "top")
	if code != 1 || !strings.Contains(stderr, "refused") || !strings.Contains(stderr, "VENDORCTL_GATEWAY_ADMIN_TOKEN") ||
		!strings.Contains(stderr, "gateway") {
		t.Errorf("wrong gateway admin token: exit %d, %q", code, stderr)
	}
	// The backend's own answer: no token is "required", a wrong one "refused".
	for token, want := range map[string]string{"": "admin token required", "Bearer wrong-token-0123456789": "admin token refused"} {
		req, _ := http.NewRequest("GET", s.adminURL+"/admin/v1/vendors", nil)
		if token != "" {
			req.Header.Set("Authorization", token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var env struct {
			Error struct{ Code, Message string }
		}
		json.NewDecoder(resp.Body).Decode(&env)
		resp.Body.Close()
		if resp.StatusCode != 401 || !strings.HasPrefix(env.Error.Message, want) {
			t.Errorf("Authorization %q: %d %q, want 401 %q...", token, resp.StatusCode, env.Error.Message, want)
		}
	}

	_, key := s.newVendor("sandbox", "mvr,psp")
	o := s.place(key, "D123"+sandboxvalues.ManualReview, "mvr", "psp")
	s.poll(key, o.OrderID, 10*time.Second, func(o order) bool { return o.Status == "under_review" })
	s.mustVendorctl("order", "release", o.OrderID)
	_, stderr, code = s.vendorctlWith(nil, "order", "release", o.OrderID)
	if code != 1 || !strings.HasPrefix(stderr, "vendorctl: not_held: ") || !strings.Contains(stderr, "not held") {
		t.Errorf("release twice: exit %d, %q", code, stderr)
	}
	req, _ := http.NewRequest("POST", s.adminURL+"/admin/v1/orders/"+o.OrderID+"/release", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 409 {
		t.Errorf("release twice: %d, want 409", resp.StatusCode)
	}
}
