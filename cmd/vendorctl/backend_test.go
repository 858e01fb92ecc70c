package main

// These tests build the real backend and vendorctl binaries, start the
// backend on free loopback ports with a temporary SQLite file, and run
// vendorctl as an operator would, checking what it prints and how it exits.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"vendorgate/cmd/vendorctl/internal/view"
	"vendorgate/shared/testbuild"
	"vendorgate/shared/testlog"
	"vendorgate/shared/wire"
)

const (
	testAdminToken    = "vendorctl-test-admin-token-0123"
	testInternalToken = "vendorctl-test-internal-token-0123"
)

// harness is one running backend and the vendorctl binary that talks to it.
type harness struct {
	t        *testing.T
	bin      string // vendorctl binary
	adminURL string
	apiURL   string
	log      *testlog.Buffer
}

// built holds the binaries, built once per test run by buildBinaries.
var built struct {
	once sync.Once
	dir  string
	err  error
}

// buildBinaries builds backend and vendorctl from the module root once and
// returns their directory (removed by TestMain).
func buildBinaries(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "vendorctl-test-bin")
		if built.err != nil {
			return
		}
		out, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil || strings.TrimSpace(string(out)) == "" {
			built.err = fmt.Errorf("go env GOMOD: %v", err)
			return
		}
		root := filepath.Dir(strings.TrimSpace(string(out)))
		built.err = testbuild.Build(root, built.dir, testbuild.Flags(), "./cmd/backend", "./cmd/vendorctl")
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.dir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startBackend runs the backend until the test ends, then stops it with
// SIGTERM; its log is printed when the test failed. A port taken between
// choosing it and the backend binding it (another package's test) costs a
// retry on new ports, not a failure.
func startBackend(t *testing.T, env ...string) *harness {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the backend")
	}
	bin := buildBinaries(t)
	for attempt := 1; ; attempt++ {
		h, err := tryStartBackend(t, bin, env...)
		if err == nil {
			return h
		}
		if attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatal(err)
		}
	}
}

func tryStartBackend(t *testing.T, bin string, env ...string) (*harness, error) {
	t.Helper()
	dir := t.TempDir()
	listen, admin := freePort(t), freePort(t)
	cmd := exec.Command(filepath.Join(bin, "backend"))
	cmd.Env = append(os.Environ(),
		"BACKEND_LISTEN="+listen,
		"BACKEND_ADMIN_LISTEN="+admin,
		"BACKEND_DATABASE="+filepath.Join(dir, "db.sqlite"),
		"BACKEND_REPORTS_DIR="+filepath.Join(dir, "reports"),
		"BACKEND_INTERNAL_TOKEN="+testInternalToken,
		"BACKEND_KEY_SIGNING_SECRETS=vendorctl-test-key-signing-secret-0123456789",
		"BACKEND_ADMIN_TOKEN="+testAdminToken,
		"BACKEND_SANDBOX_DELAY=50ms",
		"BACKEND_SEED_SANDBOX_VENDOR=false",
	)
	cmd.Env = append(cmd.Env, env...)
	h := &harness{t: t, bin: filepath.Join(bin, "vendorctl"), adminURL: "http://" + admin, apiURL: "http://" + listen, log: &testlog.Buffer{}}
	cmd.Stdout, cmd.Stderr = h.log, h.log
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("backend log:\n%s", h.log.String())
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-exited:
			return nil, fmt.Errorf("backend exited before it was ready:\n%s", h.log.String())
		default:
		}
		if resp, err := http.Get(h.adminURL + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return h, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("backend admin /healthz not ready within 20s:\n%s", h.log.String())
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// result is one vendorctl run.
type result struct {
	stdout, stderr string
	code           int
}

// runCtl runs vendorctl with env replacing the VENDORCTL_ variables.
func (h *harness) runCtl(env map[string]string, args ...string) result {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, h.bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "VENDORCTL_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		h.t.Fatalf("vendorctl %q: %v", args, err)
	}
	return result{stdout: stdout.String(), stderr: stderr.String(), code: code}
}

// ctl runs vendorctl against the backend and fails the test unless it
// succeeds with nothing on stderr.
func (h *harness) ctl(args ...string) string {
	h.t.Helper()
	r := h.runCtl(h.env(), args...)
	if r.code != 0 || r.stderr != "" {
		h.t.Fatalf("vendorctl %q: exit %d\nstderr: %s\nstdout: %s", args, r.code, r.stderr, r.stdout)
	}
	return r.stdout
}

// ctlFails runs vendorctl, expects exit code want and one line on stderr
// (plus the usage line for exit 2), and returns the first line.
func (h *harness) ctlFails(want int, args ...string) string {
	h.t.Helper()
	r := h.runCtl(h.env(), args...)
	return checkFailure(h.t, r, want, args)
}

func checkFailure(t *testing.T, r result, want int, args []string) string {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	wantLines := 1
	if want == 2 {
		wantLines = 2
	}
	if r.code != want || len(lines) != wantLines || !strings.HasPrefix(lines[0], "vendorctl: ") || r.stdout != "" {
		t.Fatalf("vendorctl %q: exit %d, want %d with %d line(s) on stderr and nothing on stdout\nstderr: %q\nstdout: %q",
			args, r.code, want, wantLines, r.stderr, r.stdout)
	}
	return lines[0]
}

func (h *harness) env() map[string]string {
	return map[string]string{"VENDORCTL_ADMIN_URL": h.adminURL, "VENDORCTL_ADMIN_TOKEN": testAdminToken}
}

func decodeInto[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(strings.NewReader(s))
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %q: %v", s, err)
	}
	return v
}

// lineWith is the first output line starting with prefix, "" when none.
func lineWith(out, prefix string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// fields splits a table line into its cells.
func fields(line string) []string { return strings.Fields(line) }

func TestVendorsAndKeysAgainstBackend(t *testing.T) {
	h := startBackend(t)

	// create: table mode says it is pending and how to approve it.
	out := h.ctl("vendor", "create", "--company", "Table Co", "--environment", "live")
	if f := fields(lineWith(out, "STATUS")); len(f) != 2 || f[1] != "pending" {
		t.Fatalf("create table has no pending status:\n%s", out)
	}
	if !strings.Contains(out, "The vendor is pending approval: vendorctl vendor approve ") {
		t.Fatalf("create table has no approval hint:\n%s", out)
	}
	if lineWith(out, "SERVICES") != "SERVICES     none" {
		t.Fatalf("a vendor created without --services shows %q", lineWith(out, "SERVICES"))
	}

	v := decodeInto[view.Vendor](t, h.ctl("-o", "json", "vendor", "create", "--company", "Acme Freight", "--environment", "sandbox", "--services", "mvr"))
	if v.VendorID == "" || v.Status != wire.VendorPending || v.Environment != "sandbox" || v.CompanyName != "Acme Freight" ||
		strings.Join(v.EnabledServices, ",") != "mvr" {
		t.Fatalf("created vendor %+v", v)
	}
	id := v.VendorID

	for _, step := range []struct {
		args   []string
		status string
	}{
		{[]string{"vendor", "approve", id}, wire.VendorApproved},
		{[]string{"vendor", "approve", id}, wire.VendorApproved}, // idempotent
		{[]string{"vendor", "suspend", id}, wire.VendorSuspended},
		{[]string{"vendor", "reinstate", id}, wire.VendorApproved},
	} {
		got := decodeInto[view.Vendor](t, h.ctl(append(step.args, "-o", "json")...))
		if got.VendorID != id || got.Status != step.status {
			t.Fatalf("%q: vendor %+v, want status %s", step.args, got, step.status)
		}
	}

	got := decodeInto[view.Vendor](t, h.ctl("vendor", "services", id, "mvr,psp,cdlis,driver_reviews", "-o", "json"))
	if strings.Join(got.EnabledServices, ",") != "mvr,psp,cdlis,driver_reviews" {
		t.Fatalf("services set to %v", got.EnabledServices)
	}

	// get: table and JSON agree with what was set.
	out = h.ctl("vendor", "get", id)
	for _, want := range []string{"VENDOR ID    " + id, "COMPANY      Acme Freight", "ENVIRONMENT  sandbox", "STATUS       approved",
		"SERVICES     mvr,psp,cdlis,driver_reviews"} {
		if lineWith(out, want) != want {
			t.Errorf("vendor get table has no line %q:\n%s", want, out)
		}
	}
	if g := decodeInto[view.Vendor](t, h.ctl("vendor", "get", "-o", "json", id)); g.VendorID != id || g.Status != wire.VendorApproved {
		t.Errorf("vendor get json: %+v", g)
	}

	// list: a JSON array (same before and after the command), and a table
	// with a header and one aligned row per vendor, oldest first.
	jsonBefore, jsonAfter := h.ctl("-o", "json", "vendor", "list"), h.ctl("vendor", "list", "-o", "json")
	if jsonBefore != jsonAfter {
		t.Fatalf("-o json before and after the command differ:\n%s\n%s", jsonBefore, jsonAfter)
	}
	// (The backend keeps created_at to the second, so two vendors created in
	// the same second may list in either order.)
	list := decodeInto[[]view.Vendor](t, jsonBefore)
	if len(list) != 2 || (list[0].VendorID != id && list[1].VendorID != id) {
		t.Fatalf("vendor list json: %+v", list)
	}
	out = h.ctl("vendor", "list")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "VENDOR ID ") {
		t.Fatalf("vendor list table:\n%s", out)
	}
	col := strings.Index(lines[0], "STATUS")
	row := lineWith(out, id)
	other := lines[1]
	if other == row {
		other = lines[2]
	}
	if !strings.HasPrefix(row[col:], "approved ") || !strings.HasPrefix(other[col:], "pending ") ||
		!strings.Contains(other, "  Table Co  ") {
		t.Fatalf("vendor list rows not aligned under the header:\n%s", out)
	}

	// key issue: JSON has the key once, with the sandbox prefix.
	type issued struct {
		Key       string    `json:"key"`
		KeyID     string    `json:"key_id"`
		ExpiresAt time.Time `json:"expires_at"`
		CreatedAt time.Time `json:"created_at"`
	}
	k1 := decodeInto[issued](t, h.ctl("-o", "json", "key", "issue", id))
	if !strings.HasPrefix(k1.Key, "vgsandbx_") || k1.KeyID == "" || k1.ExpiresAt.IsZero() {
		t.Fatalf("issued key: %+v", k1)
	}
	if life := k1.ExpiresAt.Sub(k1.CreatedAt); life != 90*24*time.Hour {
		t.Errorf("default lifetime %v, want 90 days", life)
	}
	k2 := decodeInto[issued](t, h.ctl("-o", "json", "key", "issue", id, "--lifetime", "2s"))
	if life := k2.ExpiresAt.Sub(k2.CreatedAt); life != 2*time.Second {
		t.Errorf("--lifetime 2s gave %v", life)
	}
	k3 := decodeInto[issued](t, h.ctl("-o", "json", "key", "issue", id, "--lifetime", "3d"))
	if life := k3.ExpiresAt.Sub(k3.CreatedAt); life != 72*time.Hour {
		t.Errorf("--lifetime 3d gave %v", life)
	}
	// Table mode: the key alone on a line, under the once-only warning.
	out = h.ctl("key", "issue", id, "--lifetime", "36h")
	lines = strings.Split(out, "\n")
	if !strings.Contains(lines[0], "shown only once") || !strings.HasPrefix(lines[2], "    vgsandbx_") || len(strings.Fields(lines[2])) != 1 {
		t.Fatalf("key issue table:\n%s", out)
	}
	k4 := strings.TrimSpace(lines[2])
	secrets := []string{k1.Key, k2.Key, k3.Key, k4}

	// revoke one, then list: every key id, the revoked one marked, no secret.
	rev := decodeInto[view.Key](t, h.ctl("key", "revoke", k1.KeyID, "-o", "json"))
	if rev.KeyID != k1.KeyID || rev.RevokedAt == nil {
		t.Fatalf("revoked key: %+v", rev)
	}
	listJSON := h.ctl("-o", "json", "key", "list", id)
	listTable := h.ctl("key", "list", id)
	for _, s := range secrets {
		secret := s[strings.IndexByte(s, '_')+1:]
		if strings.Contains(listJSON+listTable, secret) {
			t.Fatalf("key list shows a key's secret:\n%s\n%s", listJSON, listTable)
		}
	}
	keys := decodeInto[[]view.Key](t, listJSON)
	if len(keys) != 4 {
		t.Fatalf("key list json: %+v", keys)
	}
	for _, k := range keys {
		if k.Prefix != "vgsandbx" || k.VendorID != id || (k.KeyID == k1.KeyID) != (k.RevokedAt != nil) {
			t.Errorf("listed key %+v", k)
		}
	}
	if f := fields(lineWith(listTable, k1.KeyID)); len(f) < 3 || f[1] != "vgsandbx" || f[2] != "revoked" {
		t.Errorf("revoked key's row: %q\n%s", lineWith(listTable, k1.KeyID), listTable)
	}
	if f := fields(lineWith(listTable, k3.KeyID)); len(f) < 3 || f[2] != "active" {
		t.Errorf("active key's row: %q\n%s", lineWith(listTable, k3.KeyID), listTable)
	}

	// Error paths: the API's code and message, one line, exit 1.
	const unknown = "00000000-0000-4000-8000-000000000000"
	for _, args := range [][]string{{"vendor", "get", unknown}, {"vendor", "approve", unknown}, {"key", "issue", unknown},
		{"key", "list", unknown}, {"key", "revoke", unknown}, {"vendor", "services", unknown, "mvr"}} {
		if line := h.ctlFails(1, args...); !strings.HasPrefix(line, "vendorctl: not_found: ") {
			t.Errorf("%q: %q, want not_found", args, line)
		}
	}
	r := h.runCtl(map[string]string{"VENDORCTL_ADMIN_URL": h.adminURL, "VENDORCTL_ADMIN_TOKEN": "wrong-token-wrong-token"}, "vendor", "list")
	if line := checkFailure(t, r, 1, []string{"vendor", "list"}); line != "vendorctl: the backend admin API refused the token in VENDORCTL_ADMIN_TOKEN: "+
		"invalid_api_key: admin token refused: it is not this backend's admin_token (BACKEND_ADMIN_TOKEN)" {
		t.Errorf("wrong token: %q", line)
	}
	if strings.Contains(r.stderr, "wrong-token") {
		t.Error("the token was printed")
	}
	// Aimed at another listener (the backend's vendor API), vendorctl says
	// the address is not the admin API and which variable to check, not
	// the other listener's "not_found: no such path".
	r = h.runCtl(map[string]string{"VENDORCTL_ADMIN_URL": h.apiURL, "VENDORCTL_ADMIN_TOKEN": testAdminToken}, "vendor", "list")
	if line := checkFailure(t, r, 1, []string{"vendor", "list"}); !strings.HasPrefix(line, "vendorctl: "+h.apiURL+" is not the backend admin API: it has no GET /") ||
		!strings.HasSuffix(line, "check VENDORCTL_ADMIN_URL, which must be the backend's admin_listen") {
		t.Errorf("vendorctl aimed at the vendor API listener: %q", line)
	}
	// A local refusal never reaches the backend: the vendor keeps its services.
	h.ctlFails(2, "vendor", "services", id, "mvr,dmv")
	if g := decodeInto[view.Vendor](t, h.ctl("-o", "json", "vendor", "get", id)); len(g.EnabledServices) != 4 {
		t.Errorf("a refused services change reached the backend: %v", g.EnabledServices)
	}
}

func TestConfigErrorsAgainstBackend(t *testing.T) {
	h := startBackend(t)
	args := []string{"vendor", "list"}

	r := h.runCtl(map[string]string{"VENDORCTL_ADMIN_URL": h.adminURL}, args...)
	if line := checkFailure(t, r, 1, args); line != "vendorctl: VENDORCTL_ADMIN_TOKEN is not set: export the backend's admin token" {
		t.Errorf("missing token: %q", line)
	}

	// Nothing listens on a port just freed: refused at once, one line.
	dead := "http://" + freePort(t)
	start := time.Now()
	r = h.runCtl(map[string]string{"VENDORCTL_ADMIN_URL": dead, "VENDORCTL_ADMIN_TOKEN": testAdminToken}, args...)
	line := checkFailure(t, r, 1, args)
	if !strings.HasPrefix(line, "vendorctl: cannot reach the backend admin API at "+dead+": ") || !strings.Contains(line, "connection refused") {
		t.Errorf("unreachable: %q", line)
	}
	if took := time.Since(start); took > 8*time.Second {
		t.Errorf("a refused connection took %v: it must not wait for the 10s timeout", took)
	}
}

// order is the part of the admin order answer the order tests read.
func orderOf(t *testing.T, s string) view.Order {
	t.Helper()
	return decodeInto[view.Order](t, s)
}

func service(o wire.Order, name string) wire.ServiceEntry {
	for _, s := range o.Services {
		if s.Service == name {
			return s
		}
	}
	return wire.ServiceEntry{}
}

// placeOrder places an order straight on the backend's vendor API, as the
// gateway would forward it.
func (h *harness) placeOrder(vendorID, license string, services ...string) string {
	h.t.Helper()
	body, _ := json.Marshal(map[string]any{
		"mc_number": "MC-123456",
		"driver": map[string]string{"first_name": "Ann", "last_name": "Lee", "date_of_birth": "1980-02-03",
			"license_number": license, "license_state": "TX"},
		"services": services,
	})
	resp := h.vendorCall(http.MethodPost, vendorID, "/api/vendor/v1/orders", bytes.NewReader(body))
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusAccepted && resp.StatusCode != http.StatusOK {
		h.t.Fatalf("place order: %s %s", resp.Status, b)
	}
	o := decodeInto[wire.Order](h.t, string(b))
	if o.OrderID == "" {
		h.t.Fatalf("place order: no order_id in %s", b)
	}
	return o.OrderID
}

func (h *harness) vendorCall(method, vendorID, path string, body io.Reader) *http.Response {
	h.t.Helper()
	req, err := http.NewRequest(method, h.apiURL+path, body)
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set(wire.HeaderInternalToken, testInternalToken)
	req.Header.Set(wire.HeaderVendorID, vendorID)
	req.Header.Set(wire.HeaderEnvironment, "sandbox")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(wire.HeaderIdempotency, fmt.Sprintf("vendorctl-test-%d", time.Now().UnixNano()))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	return resp
}

// waitFor polls `order get` until cond holds for the order (10s at most).
func (h *harness) waitFor(orderID, what string, cond func(wire.Order) bool) view.Order {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		a := orderOf(h.t, h.ctl("-o", "json", "order", "get", orderID))
		if cond(a.Order) {
			return a
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("order %s never reached %s: %+v", orderID, what, a.Order)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestOrdersAgainstBackend(t *testing.T) {
	h := startBackend(t)
	v := decodeInto[view.Vendor](t, h.ctl("-o", "json", "vendor", "create", "--company", "Order Co", "--environment", "sandbox",
		"--services", "mvr,psp,cdlis,driver_reviews"))
	h.ctl("vendor", "approve", v.VendorID)

	// License ending 0003: the sandbox holds the MVR for manual_review.
	held := h.placeOrder(v.VendorID, "D1230003", "mvr", "psp")
	a := h.waitFor(held, "mvr under manual_review", func(o wire.Order) bool {
		s := service(o, "mvr")
		return s.Status == wire.StatusUnderReview && s.Reason != nil && *s.Reason == wire.ReasonManualReview
	})
	if a.VendorID != v.VendorID || a.Order.OrderID != held || a.Order.Final {
		t.Fatalf("order get json: %+v", a)
	}
	out := h.ctl("order", "get", held)
	for _, want := range []string{"ORDER ID      " + held, "VENDOR ID     " + v.VendorID, "FINAL         false", "MC NUMBER     "} {
		if !strings.HasPrefix(lineWith(out, want), want) {
			t.Errorf("order get table has no line %q:\n%s", want, out)
		}
	}
	if f := fields(lineWith(out, "mvr ")); len(f) < 4 || f[1] != "under_review" || f[2] != "manual_review" || f[3] != "TX" {
		t.Errorf("mvr row %q:\n%s", lineWith(out, "mvr "), out)
	}

	a = orderOf(t, h.ctl("order", "release", held, "--service", "mvr", "-o", "json"))
	if s := service(a.Order, "mvr"); s.Status != wire.StatusCompleted || s.FileURL == nil {
		t.Fatalf("released mvr: %+v", s)
	}
	if line := h.ctlFails(1, "order", "release", held); !strings.HasPrefix(line, "vendorctl: not_held: ") {
		t.Errorf("release with nothing held: %q", line)
	}
	a = h.waitFor(held, "final", func(o wire.Order) bool { return o.Final })
	if line := h.ctlFails(1, "order", "complete", held, "--service", "psp"); !strings.HasPrefix(line, "vendorctl: request_failed: ") ||
		!strings.Contains(line, "already") {
		t.Errorf("completing a final service: %q", line)
	}

	// License ending 0007: nothing finishes by itself, so staff act.
	stuck := h.placeOrder(v.VendorID, "D1230007", "mvr", "psp", "cdlis", "driver_reviews")
	dir := t.TempDir()
	pdf := []byte("%PDF-1.4\n% vendorctl test report\n1 0 obj << >> endobj\ntrailer << >>\n%%EOF\n")
	pdfPath := filepath.Join(dir, "psp.pdf")
	notPDF := filepath.Join(dir, "psp-really-a-png.pdf")
	reviews := filepath.Join(dir, "reviews.json")
	os.WriteFile(pdfPath, pdf, 0o600)
	os.WriteFile(notPDF, []byte("\x89PNG\r\n\x1a\n"), 0o600)
	os.WriteFile(reviews, []byte(`{"found":true,"reviews":[{"rating":5,"text":"Great","date":"2026-01-02"}]}`), 0o600)

	line := h.ctlFails(2, "order", "complete", stuck, "--service", "psp", "--file", notPDF)
	if !strings.Contains(line, "is not a PDF") {
		t.Errorf("not a PDF: %q", line)
	}
	a = orderOf(t, h.ctl("-o", "json", "order", "complete", stuck, "--service", "psp", "--file", pdfPath))
	if s := service(a.Order, "psp"); s.Status != wire.StatusCompleted || s.FileURL == nil {
		t.Fatalf("completed psp: %+v", s)
	}
	// The report served is the very file vendorctl sent.
	resp := h.vendorCall(http.MethodGet, v.VendorID, "/api/vendor/v1/orders/"+stuck+"/reports/psp", nil)
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Equal(got, pdf) {
		t.Fatalf("report download: %s, %d bytes, want the %d uploaded", resp.Status, len(got), len(pdf))
	}

	out = h.ctl("order", "complete", stuck, "--service", "driver_reviews", "--result", reviews)
	if f := fields(lineWith(out, "driver_reviews ")); len(f) < 2 || f[1] != "completed" || !strings.HasSuffix(lineWith(out, "driver_reviews "), "1 review") {
		t.Errorf("driver_reviews row after complete --result:\n%s", out)
	}
	a = orderOf(t, h.ctl("-o", "json", "order", "complete", stuck, "--service", "mvr"))
	if s := service(a.Order, "mvr"); s.Status != wire.StatusCompleted || s.FileURL == nil {
		t.Errorf("mvr completed with a generated report: %+v", s)
	}
	a = orderOf(t, h.ctl("-o", "json", "order", "fail", stuck, "--service", "cdlis", "--reason", "no_report"))
	if s := service(a.Order, "cdlis"); s.Status != wire.StatusFailed || s.Reason == nil || *s.Reason != wire.ReasonNoReport {
		t.Fatalf("failed cdlis: %+v", s)
	}
	if !a.Order.Final || a.Order.Status != wire.StatusPartiallyCompleted {
		t.Errorf("order after every service finished: status %s final %v", a.Order.Status, a.Order.Final)
	}
	if line := h.ctlFails(1, "order", "fail", stuck, "--service", "cdlis", "--reason", "no_report"); !strings.Contains(line, "request_failed") {
		t.Errorf("failing a failed service: %q", line)
	}

	// delete: unfinished services fail record_deleted, reports go away.
	doomed := h.placeOrder(v.VendorID, "D1230007", "mvr", "psp")
	h.ctl("order", "complete", doomed, "--service", "psp")
	a = orderOf(t, h.ctl("order", "delete", doomed, "-o", "json"))
	if s := service(a.Order, "mvr"); s.Status != wire.StatusFailed || s.Reason == nil || *s.Reason != wire.ReasonRecordDeleted {
		t.Errorf("mvr after delete: %+v", s)
	}
	if s := service(a.Order, "psp"); s.FileURL != nil {
		t.Errorf("psp still has a report after delete: %v", *s.FileURL)
	}

	const unknown = "00000000-0000-4000-8000-000000000000"
	for _, args := range [][]string{{"order", "get", unknown}, {"order", "release", unknown}, {"order", "delete", unknown},
		{"order", "complete", unknown, "--service", "mvr"}, {"order", "fail", unknown, "--service", "mvr", "--reason", "no_record"}} {
		if line := h.ctlFails(1, args...); !strings.HasPrefix(line, "vendorctl: not_found: ") {
			t.Errorf("%q: %q, want not_found", args, line)
		}
	}
	if line := h.ctlFails(1, "order", "release", held, "--service", "cdlis"); !strings.HasPrefix(line, "vendorctl: validation_error: ") ||
		!strings.Contains(line, "(service: ") {
		t.Errorf("releasing a service the order lacks: %q", line)
	}
}
