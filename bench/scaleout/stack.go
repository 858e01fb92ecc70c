package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"vendorgate/bench/internal/childproc"
	"vendorgate/shared/testpg"
	"vendorgate/shared/testredis"
)

const (
	internalToken = "scaleout-internal-token-0123456789"
	signingSecret = "scaleout-key-signing-secret-0123456789"
	adminToken    = "scaleout-admin-token-0123456789ab"
)

// stack is the scaled-out deployment on loopback: one PostgreSQL server,
// a Redis Cluster of three masters, two backends on one database and two
// gateways balancing over both backends, limiting in the cluster.
type stack struct {
	dir      string
	bins     string
	cleanups []func()

	pg      *testpg.Server
	dbURL   string
	cluster *testredis.Cluster
	bprocs  []*restartable
	admins  []string // backend admin base URLs
	backend []string // backend main base URLs
	gws     []string // gateway public base URLs
	gwAdmin []string
}

// onStop registers f to run, last registered first, when the stack stops.
func (s *stack) onStop(f func()) { s.cleanups = append(s.cleanups, f) }

// stop undoes everything started so far.
func (s *stack) stop() {
	for i := len(s.cleanups) - 1; i >= 0; i-- {
		s.cleanups[i]()
	}
	s.cleanups = nil
}

// startPostgres starts the PostgreSQL server and creates the database
// both backends share.
func (s *stack) startPostgres() error {
	pg, err := testpg.Run(testpg.Options{})
	if err != nil {
		return err
	}
	s.pg = pg
	s.onStop(pg.Close)
	s.dbURL, err = pg.CreateDatabase("scaleout")
	return err
}

// startCluster starts three redis-server processes in cluster mode joined
// by redis-cli --cluster create, as the compose profile's init container
// does.
func (s *stack) startCluster() error {
	c, err := testredis.RunCluster(testredis.ClusterOptions{Dir: filepath.Join(s.dir, "redis"), NodeTimeout: 2 * time.Second})
	if err != nil {
		return err
	}
	s.cluster = c
	s.onStop(c.Close)
	return nil
}

func (s *stack) redisURLs() string { return strings.Join(s.cluster.URLs(), ",") }

// listenAddrs are two free loopback addresses: a server's main and admin
// listeners.
func listenAddrs() (main, admin string, err error) {
	if main, err = childproc.FreeAddr(); err == nil {
		admin, err = childproc.FreeAddr()
	}
	return main, admin, err
}

// startBackends starts two backends at once on the one database (both run
// the migrations under the advisory lock) with one shared reports folder.
func (s *stack) startBackends(ctx context.Context) error {
	reports := filepath.Join(s.dir, "reports")
	var procs []*childproc.Proc
	for i := range 2 {
		addr, admin, err := listenAddrs()
		if err != nil {
			return err
		}
		env := []string{
			"BACKEND_LISTEN=" + addr,
			"BACKEND_ADMIN_LISTEN=" + admin,
			"BACKEND_DATABASE=" + s.dbURL,
			"BACKEND_REPORTS_DIR=" + reports,
			"BACKEND_REDIS_URL=" + s.redisURLs(),
			"BACKEND_INTERNAL_TOKEN=" + internalToken,
			"BACKEND_KEY_SIGNING_SECRETS=" + signingSecret,
			"BACKEND_ADMIN_TOKEN=" + adminToken,
			"BACKEND_LOG_LEVEL=warn",
			"BACKEND_SHUTDOWN_GRACE=3s",
		}
		r := &restartable{dir: s.dir, name: fmt.Sprintf("backend-%d", i+1), env: env, bin: filepath.Join(s.bins, "backend")}
		if err := r.start(); err != nil {
			return err
		}
		s.onStop(func() { r.p.Stop(10 * time.Second) })
		s.bprocs = append(s.bprocs, r)
		procs = append(procs, r.p)
		s.backend = append(s.backend, "http://"+addr)
		s.admins = append(s.admins, "http://"+admin)
	}
	for i, p := range procs {
		if err := waitReady(ctx, s.admins[i]+"/readyz", p); err != nil {
			return err
		}
	}
	return nil
}

// startGateways starts two gateways, each balancing over both backends and
// limiting in the cluster, with the configuration file gatewayYAML.
func (s *stack) startGateways(ctx context.Context, gatewayYAML string, redisTimeout time.Duration) error {
	cfg := filepath.Join(s.dir, "gateway.yaml")
	if err := os.WriteFile(cfg, []byte(gatewayYAML), 0o600); err != nil {
		return err
	}
	var procs []*childproc.Proc
	for i := range 2 {
		addr, admin, err := listenAddrs()
		if err != nil {
			return err
		}
		env := []string{
			"GATEWAY_LISTEN=" + addr,
			"GATEWAY_ADMIN_LISTEN=" + admin,
			"GATEWAY_BACKEND_URL=" + strings.Join(s.backend, ","),
			"GATEWAY_REDIS_URL=" + s.redisURLs(),
			"GATEWAY_REDIS_TIMEOUT=" + redisTimeout.String(),
			"GATEWAY_INTERNAL_TOKEN=" + internalToken,
			"GATEWAY_KEY_SIGNING_SECRETS=" + signingSecret,
			"GATEWAY_LOG_LEVEL=warn",
			"GATEWAY_MAX_CONNS_PER_PEER=100000", // the load comes from one loopback address
			"GATEWAY_MAX_NEW_CONNS_PER_PEER=100000",
			"GATEWAY_SHUTDOWN_GRACE=3s",
		}
		p, err := childproc.Start(s.dir, fmt.Sprintf("gateway-%d", i+1), env, filepath.Join(s.bins, "gateway"), "-config", cfg)
		if err != nil {
			return err
		}
		s.onStop(func() { p.Stop(10 * time.Second) })
		procs = append(procs, p)
		s.gws = append(s.gws, "http://"+addr)
		s.gwAdmin = append(s.gwAdmin, "http://"+admin)
	}
	for i, p := range procs {
		if err := waitReady(ctx, s.gwAdmin[i]+"/readyz", p); err != nil {
			return err
		}
	}
	return nil
}

// newVendor creates, approves and keys a sandbox vendor through the first
// backend's admin API (the second serves it all the same: one database).
func (s *stack) newVendor(ctx context.Context, name string) (vendorID, key string, err error) {
	var v struct {
		VendorID string `json:"vendor_id"`
		Status   string `json:"status"`
	}
	if err := s.admin(ctx, "POST", "/admin/v1/vendors", map[string]any{"company_name": name, "environment": "sandbox",
		"enabled_services": []string{"mvr", "psp", "cdlis", "driver_reviews"}}, 201, &v); err != nil {
		return "", "", err
	}
	if err := s.admin(ctx, "POST", "/admin/v1/vendors/"+v.VendorID+"/approve", nil, 200, &v); err != nil {
		return "", "", err
	}
	if v.Status != "approved" {
		return "", "", fmt.Errorf("vendor %s is %q after approve", v.VendorID, v.Status)
	}
	var k struct {
		Key string `json:"key"`
	}
	if err := s.admin(ctx, "POST", "/admin/v1/vendors/"+v.VendorID+"/keys", map[string]any{}, 201, &k); err != nil {
		return "", "", err
	}
	if k.Key == "" {
		return "", "", errors.New("key issue answered no key")
	}
	return v.VendorID, k.Key, nil
}

func (s *stack) admin(ctx context.Context, method, path string, body any, want int, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.admins[0]+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s = %d %s, want %d", method, path, resp.StatusCode, b, want)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
	return nil
}

// waitReady polls url until 200, failing early when p exits.
func waitReady(ctx context.Context, url string, p *childproc.Proc) error {
	err := waitFor(ctx, 30*time.Second, func() bool {
		if p.Exited() {
			return true
		}
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	if p.Exited() {
		return fmt.Errorf("%s exited before it was ready:\n%s", p.Name(), p.Tail())
	}
	if err != nil {
		return fmt.Errorf("%s not ready at %s: %w\n%s", p.Name(), url, err, p.Tail())
	}
	return nil
}

// waitFor polls ok every 50ms until it holds, the bound passes or ctx ends.
func waitFor(ctx context.Context, bound time.Duration, ok func() bool) error {
	deadline := time.Now().Add(bound)
	for {
		if ok() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", bound)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// restartable is a backend that a failure run stops and starts again with
// the same arguments.
type restartable struct {
	dir, name, bin string
	env, args      []string
	p              *childproc.Proc
	starts         int
}

func (r *restartable) start() error {
	r.starts++
	name := r.name
	if r.starts > 1 {
		name = fmt.Sprintf("%s.%d", r.name, r.starts)
	}
	p, err := childproc.Start(r.dir, name, r.env, r.bin, r.args...)
	if err != nil {
		return err
	}
	r.p = p
	return nil
}
