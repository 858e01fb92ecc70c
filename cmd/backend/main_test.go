package main

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func TestCheckPrintsMaskedConfig(t *testing.T) {
	t.Setenv("BACKEND_INTERNAL_TOKEN", "internal-secret-0123456789")
	t.Setenv("BACKEND_ADMIN_TOKEN", "admin-secret-0123456789")
	t.Setenv("BACKEND_KEY_SIGNING_SECRETS", "signing-secret-0123456789-0123456789")
	var out, errb bytes.Buffer
	if code := run([]string{"-config", "../../config/examples/backend.yaml", "-check"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if strings.Contains(out.String(), "secret-0123456789") || !strings.Contains(out.String(), "sandbox_delay") {
		t.Fatalf("-check output:\n%s", out.String())
	}
}

func TestCheckRefusesBadConfig(t *testing.T) {
	t.Setenv("BACKEND_INTERNAL_TOKEN", "short")
	t.Setenv("BACKEND_ADMIN_TOKEN", "admin-secret-0123456789")
	var out, errb bytes.Buffer
	if code := run([]string{"-check"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "internal_token") {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
}

func TestRunServesAndStopsOnSIGTERM(t *testing.T) {
	dir := t.TempDir()
	api, admin := freeAddr(t), freeAddr(t)
	for k, v := range map[string]string{
		"BACKEND_LISTEN": api, "BACKEND_ADMIN_LISTEN": admin,
		"BACKEND_DATABASE": filepath.Join(dir, "var", "vg.db"), "BACKEND_REPORTS_DIR": filepath.Join(dir, "var", "reports"),
		"BACKEND_INTERNAL_TOKEN": "internal-secret-0123456789", "BACKEND_ADMIN_TOKEN": "admin-secret-0123456789",
		"BACKEND_KEY_SIGNING_SECRETS": "signing-secret-0123456789-0123456789",
		"BACKEND_SEED_SANDBOX_VENDOR": "true", "BACKEND_SHUTDOWN_GRACE": "2s",
	} {
		t.Setenv(k, v)
	}
	var out, logs bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- run(nil, &out, &logs) }()
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
	if _, err := os.Stat(filepath.Join(dir, "var", "reports")); err != nil {
		t.Fatalf("reports directory not created: %v", err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("did not stop within 10s of SIGTERM")
	}
	if !strings.Contains(logs.String(), `"msg":"backend listening"`) || strings.Contains(logs.String(), "secret-0123456789") {
		t.Fatalf("logs:\n%s", logs.String())
	}
}
