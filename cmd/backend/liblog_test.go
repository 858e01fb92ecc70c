package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"vendorgate/shared/testlog"
)

// TestEveryLogLineIsJSON: every line the backend writes to its log is one
// JSON object, the client libraries' own included. A revocation published
// to a Redis that is not there makes go-redis log its failed dial; that
// line reaches the backend's JSON log (at debug level, as the gateway logs
// it), not the process's stderr in the library's plain text.
func TestEveryLogLineIsJSON(t *testing.T) {
	dir := t.TempDir()
	api, admin, dead := freeAddr(t), freeAddr(t), freeAddr(t)
	const token = "admin-secret-0123456789"
	for k, v := range map[string]string{
		"BACKEND_LISTEN": api, "BACKEND_ADMIN_LISTEN": admin,
		"BACKEND_DATABASE": filepath.Join(dir, "vg.db"), "BACKEND_REPORTS_DIR": filepath.Join(dir, "reports"),
		"BACKEND_INTERNAL_TOKEN": "internal-secret-0123456789", "BACKEND_ADMIN_TOKEN": token,
		"BACKEND_KEY_SIGNING_SECRETS": "signing-secret-0123456789-0123456789",
		"BACKEND_SEED_SANDBOX_VENDOR": "true", "BACKEND_SHUTDOWN_GRACE": "2s",
		"BACKEND_REDIS_URL": "redis://" + dead + "/0", "BACKEND_LOG_LEVEL": "debug",
	} {
		t.Setenv(k, v)
	}
	var out bytes.Buffer
	logs := &testlog.Buffer{}
	done := make(chan int, 1)
	go func() { done <- run(nil, &out, logs) }()
	call := func(method, path string) []byte {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+admin+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		if r.StatusCode/100 != 2 {
			t.Fatalf("%s %s: %d %s", method, path, r.StatusCode, b)
		}
		return b
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := http.Get("http://" + admin + "/healthz")
		if err == nil {
			r.Body.Close()
			if r.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("backend not healthy within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	var vendors []struct {
		VendorID string `json:"vendor_id"`
	}
	b := call("GET", "/admin/v1/vendors")
	if err := json.Unmarshal(b, &vendors); err != nil || len(vendors) == 0 {
		var wrapped struct {
			Vendors []struct {
				VendorID string `json:"vendor_id"`
			} `json:"vendors"`
		}
		if json.Unmarshal(b, &wrapped) != nil || len(wrapped.Vendors) == 0 {
			t.Fatalf("no vendor in %s", b)
		}
		vendors = wrapped.Vendors
	}
	var key struct {
		KeyID string `json:"key_id"`
	}
	if err := json.Unmarshal(call("POST", "/admin/v1/vendors/"+vendors[0].VendorID+"/keys"), &key); err != nil || key.KeyID == "" {
		t.Fatalf("issue a key: %v", err)
	}
	call("POST", "/admin/v1/keys/"+key.KeyID+"/revoke")

	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("did not stop within 10s of SIGTERM")
	}
	sawRedis := false
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var obj map[string]any
		if err := json.Unmarshal([]byte(line), &obj); err != nil {
			t.Errorf("a log line that is not one JSON object: %q", line)
			continue
		}
		if obj["msg"] == "redis client" && strings.Contains(obj["detail"].(string), "failed to dial") {
			sawRedis = true
		}
	}
	if !sawRedis {
		t.Errorf("go-redis's failed dial is not in the backend's JSON log:\n%s", logs.String())
	}
}
