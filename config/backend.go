package config

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"vendorgate/shared/apikey"
)

func lookupEnv(name string) (string, bool) { return os.LookupEnv(name) }

// Backend is the backend's whole configuration.
type Backend struct {
	// Listen serves the vendor API (to the gateway) and the internal API.
	// Default "127.0.0.1:8081".
	Listen string `yaml:"listen" env:"BACKEND_LISTEN"`
	// TLS serves Listen over TLS, for a network between the gateway and
	// the backend that is not trusted. Off without a certificate. The
	// admin listener stays plain.
	TLS BackendTLSListener `yaml:"tls"`
	// AdminListen serves the operator API (vendorctl), /metrics, /healthz,
	// /readyz. Default "127.0.0.1:8082".
	AdminListen string `yaml:"admin_listen" env:"BACKEND_ADMIN_LISTEN"`
	// Database is a SQLite file path (default "var/vendorgate.db") or a
	// postgres:// URL.
	Database string `yaml:"database" env:"BACKEND_DATABASE"`
	// PublicBaseURL is the gateway's public address, used in poll.url,
	// Location and file_url. Default "http://localhost:8080".
	PublicBaseURL string `yaml:"public_base_url" env:"BACKEND_PUBLIC_BASE_URL"`
	// InternalToken is what the gateway must send. Required.
	InternalToken string `yaml:"internal_token" env:"BACKEND_INTERNAL_TOKEN" secret:"true"`
	// KeySigningSecrets sign the API keys the backend issues: the first
	// signs, every one verifies at the gateways, so a new secret goes first
	// and the old one stays second while keys it signed are in use. Each is
	// at least 32 characters; the same list as the gateways'. Required.
	KeySigningSecrets List `yaml:"key_signing_secrets" env:"BACKEND_KEY_SIGNING_SECRETS" secret:"true"`
	// AdminToken is what vendorctl must send: the token named "admin" in
	// the audit trail. It or AdminTokens is required.
	AdminToken string `yaml:"admin_token" env:"BACKEND_ADMIN_TOKEN" secret:"true"`
	// AdminTokens are named admin tokens, each "name:token": every one is
	// accepted, and the audit trail names who acted by the token's name, so
	// one operator's token can be removed without the others'. Names are
	// 1-32 of a-z, 0-9, '.', '_', '-'; tokens 16+ characters, all distinct.
	AdminTokens List `yaml:"admin_tokens" env:"BACKEND_ADMIN_TOKENS" secret:"true"`
	// AuditRetention is how long audit records are kept; the sweeper
	// deletes older ones. Default 400d.
	AuditRetention time.Duration `yaml:"audit_retention" env:"BACKEND_AUDIT_RETENTION"`
	// BillingExport sends every billable service as a CloudEvent to an
	// OpenMeter-compatible endpoint. Off while its url is empty.
	BillingExport BillingExport `yaml:"billing_export"`
	// RedisURL, when set, is where key and vendor changes are published.
	RedisURL List `yaml:"redis_url" env:"BACKEND_REDIS_URL"`
	// RedisMasterName selects Sentinel.
	RedisMasterName string `yaml:"redis_master_name" env:"BACKEND_REDIS_MASTER_NAME"`
	// OrderDeadline closes unfinished orders. Default 48h.
	OrderDeadline time.Duration `yaml:"order_deadline" env:"BACKEND_ORDER_DEADLINE"`
	// SweepInterval is how often the deadline sweeper runs, and the
	// revocation of keys whose rotation overlap has ended. Default 1s.
	SweepInterval time.Duration `yaml:"sweep_interval" env:"BACKEND_SWEEP_INTERVAL"`
	// SandboxDelay is how long the sandbox provider takes per step. Default 5s.
	SandboxDelay time.Duration `yaml:"sandbox_delay" env:"BACKEND_SANDBOX_DELAY"`
	// KeyPrefixes are the key prefixes this deployment issues.
	KeyPrefixes Prefixes `yaml:"key_prefixes"`
	// KeyLifetime is the default lifetime of an issued key. Default 90d.
	KeyLifetime time.Duration `yaml:"key_lifetime" env:"BACKEND_KEY_LIFETIME"`
	// MVRUnavailableStates are license states for which an MVR cannot be
	// ordered (422 mvr_state_unavailable).
	MVRUnavailableStates List `yaml:"mvr_unavailable_states" env:"BACKEND_MVR_UNAVAILABLE_STATES"`
	// ReportsDir holds report PDFs. Default "var/reports".
	ReportsDir string `yaml:"reports_dir" env:"BACKEND_REPORTS_DIR"`
	// SeedSandboxVendor creates an approved sandbox vendor with every
	// service on first start (for make run). Default false.
	SeedSandboxVendor bool `yaml:"seed_sandbox_vendor" env:"BACKEND_SEED_SANDBOX_VENDOR"`
	// MaxBodyBytes bounds a request body. Default 1048576 (1 MiB).
	MaxBodyBytes int `yaml:"max_body_bytes" env:"BACKEND_MAX_BODY_BYTES"`
	// StreamIdleTimeout bounds a report download by progress, not as a
	// whole: past it with no byte taken by the reader, it is cut. Default 30s.
	StreamIdleTimeout time.Duration `yaml:"stream_idle_timeout" env:"BACKEND_STREAM_IDLE_TIMEOUT"`
	// ShutdownGrace bounds the drain on SIGTERM. Default 15s.
	ShutdownGrace time.Duration `yaml:"shutdown_grace" env:"BACKEND_SHUTDOWN_GRACE"`
	// LogLevel is debug, info, warn or error. Default info.
	LogLevel string `yaml:"log_level" env:"BACKEND_LOG_LEVEL"`
}

// BackendTLSListener is the backend's side of TLS to the gateway. The files
// are read at start (and by -check): one that cannot be read, holds no
// certificate, or a key that does not match its certificate stops both.
type BackendTLSListener struct {
	// CertFile and KeyFile are the backend's PEM certificate (leaf first)
	// and key; setting them turns TLS on for listen.
	CertFile string `yaml:"cert_file" env:"BACKEND_TLS_CERT_FILE"`
	KeyFile  string `yaml:"key_file" env:"BACKEND_TLS_KEY_FILE"`
	// ClientCAFile, when set, requires every client of listen to show a
	// certificate signed by one of its PEM CAs (mutual TLS).
	ClientCAFile string `yaml:"client_ca_file" env:"BACKEND_TLS_CLIENT_CA_FILE"`
}

// Enabled reports whether listen serves TLS.
func (t BackendTLSListener) Enabled() bool { return t.CertFile != "" || t.KeyFile != "" }

func (t BackendTLSListener) validate() []error {
	var errs []error
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		errs = append(errs, fmt.Errorf("tls: cert_file %s has no key: set tls.key_file (BACKEND_TLS_KEY_FILE)", t.CertFile))
	case t.CertFile == "" && t.KeyFile != "":
		errs = append(errs, fmt.Errorf("tls: key_file %s has no certificate: set tls.cert_file (BACKEND_TLS_CERT_FILE)", t.KeyFile))
	}
	if t.ClientCAFile != "" && !t.Enabled() {
		errs = append(errs, fmt.Errorf("tls.client_ca_file: %s is set but tls.cert_file and tls.key_file are not: client certificates are asked for in a TLS handshake", t.ClientCAFile))
	}
	return errs
}

// BillingExport is the billing exporter's settings (docs/billing.md).
type BillingExport struct {
	// URL is the ingest endpoint, such as
	// https://openmeter.example/api/v1/events; empty: no export.
	URL string `yaml:"url" env:"BACKEND_BILLING_EXPORT_URL"`
	// Token, when set, is sent as a bearer token.
	Token string `yaml:"token" env:"BACKEND_BILLING_EXPORT_TOKEN" secret:"true"`
	// Source and Type are the events' CloudEvents source and type.
	Source string `yaml:"source" env:"BACKEND_BILLING_EXPORT_SOURCE"`
	Type   string `yaml:"type" env:"BACKEND_BILLING_EXPORT_TYPE"`
	// Interval is how often the outbox is filled and sent.
	Interval time.Duration `yaml:"interval" env:"BACKEND_BILLING_EXPORT_INTERVAL"`
	// BatchSize bounds the events of one request.
	BatchSize int `yaml:"batch_size" env:"BACKEND_BILLING_EXPORT_BATCH_SIZE"`
	// Timeout bounds one request.
	Timeout time.Duration `yaml:"timeout" env:"BACKEND_BILLING_EXPORT_TIMEOUT"`
	// BackoffMin and BackoffMax bound the wait before a failed batch is
	// sent again.
	BackoffMin time.Duration `yaml:"backoff_min" env:"BACKEND_BILLING_EXPORT_BACKOFF_MIN"`
	BackoffMax time.Duration `yaml:"backoff_max" env:"BACKEND_BILLING_EXPORT_BACKOFF_MAX"`
}

func (b BillingExport) validate() []error {
	var errs []error
	if b.URL != "" {
		if err := checkHTTPURL(b.URL); err != nil {
			errs = append(errs, fmt.Errorf("billing_export.url: %w", err))
		}
	}
	if b.Source == "" || b.Type == "" {
		errs = append(errs, errors.New("billing_export.source and billing_export.type must be set (default vendorgate-backend, vendorgate.service.billable)"))
	}
	if b.Interval <= 0 || b.Timeout <= 0 || b.BatchSize < 1 || b.BatchSize > 1000 || b.BackoffMin <= 0 || b.BackoffMax < b.BackoffMin {
		errs = append(errs, fmt.Errorf("billing_export: interval %s and timeout %s must be positive, batch_size %d from 1 to 1000, backoff_min %s positive and at most backoff_max %s",
			b.Interval, b.Timeout, b.BatchSize, b.BackoffMin, b.BackoffMax))
	}
	return errs
}

// DefaultBackend returns the documented defaults.
func DefaultBackend() *Backend {
	return &Backend{
		Listen:        "127.0.0.1:8081",
		AdminListen:   "127.0.0.1:8082",
		Database:      "var/vendorgate.db",
		PublicBaseURL: "http://localhost:8080",
		OrderDeadline: 48 * time.Hour,
		SweepInterval: time.Second,
		SandboxDelay:  5 * time.Second,
		KeyPrefixes:   Prefixes{Sandbox: apikey.DefaultSandboxPrefix, Live: apikey.DefaultLivePrefix},
		KeyLifetime:   90 * 24 * time.Hour,
		// AuditRetention: a year and a month, so that a year-end review
		// still finds the whole year.
		AuditRetention: 400 * 24 * time.Hour,
		ReportsDir:     "var/reports",
		MaxBodyBytes:   1 << 20,
		ShutdownGrace:  15 * time.Second,
		LogLevel:       "info",

		StreamIdleTimeout: 30 * time.Second,
		BillingExport: BillingExport{Source: "vendorgate-backend", Type: "vendorgate.service.billable", Interval: 5 * time.Second,
			BatchSize: 100, Timeout: 10 * time.Second, BackoffMin: time.Second, BackoffMax: 5 * time.Minute},
	}
}

// LoadBackend reads the backend's configuration: defaults, the file at path
// (none when empty), the environment, then Validate.
func LoadBackend(path string, env Env) (*Backend, error) {
	cfg := DefaultBackend()
	if _, err := load(cfg, path, prefixed(env, "BACKEND_")); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// IsPostgres reports whether Database names a PostgreSQL server.
func (c *Backend) IsPostgres() bool {
	return strings.HasPrefix(c.Database, "postgres://") || strings.HasPrefix(c.Database, "postgresql://")
}

// Validate checks every setting and says what to change.
func (c *Backend) Validate() error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if err := checkListen(c.Listen); err != nil {
		add("listen: %v", err)
	}
	if err := checkListen(c.AdminListen); err != nil {
		add("admin_listen: %v", err)
	}
	errs = append(errs, c.TLS.validate()...)
	errs = append(errs, c.BillingExport.validate()...)
	if c.Database == "" {
		add("database: set a SQLite file path or a postgres:// URL (BACKEND_DATABASE)")
	}
	if err := checkHTTPURL(c.PublicBaseURL); err != nil {
		add("public_base_url: %v", err)
	} else if u, _ := url.Parse(c.PublicBaseURL); u.Path != "" && u.Path != "/" {
		add("public_base_url: %q must not have a path", c.PublicBaseURL)
	}
	if len(c.InternalToken) < 16 {
		add("internal_token: set a shared secret of at least 16 characters (BACKEND_INTERNAL_TOKEN), the same as the gateway's")
	}
	if err := checkSigningSecrets(c.KeySigningSecrets, c.InternalToken, "BACKEND_KEY_SIGNING_SECRETS", "gateways'"); err != nil {
		add("key_signing_secrets: %v", err)
	}
	if _, err := c.NamedAdminTokens(); err != nil {
		add("%v", err)
	}
	if c.AuditRetention < 24*time.Hour {
		add("audit_retention: %s is too short: keep audit records at least a day (default 400d)", c.AuditRetention)
	}
	for _, u := range c.RedisURL {
		if !strings.HasPrefix(u, "redis://") && !strings.HasPrefix(u, "rediss://") {
			add("redis_url: %q is not a redis:// URL", RedactURL(u))
		}
	}
	if c.OrderDeadline <= 0 || c.SweepInterval <= 0 || c.SandboxDelay < 0 || c.KeyLifetime <= 0 {
		add("order_deadline, sweep_interval and key_lifetime must be positive, sandbox_delay not negative")
	}
	if err := c.KeyPrefixes.APIKey().Validate(); err != nil {
		add("key_prefixes: %v", err)
	}
	for _, s := range c.MVRUnavailableStates {
		if len(s) != 2 || strings.ToUpper(s) != s {
			add("mvr_unavailable_states: %q is not a two-letter state code such as NY", s)
		}
	}
	if c.ReportsDir == "" || c.MaxBodyBytes <= 0 {
		add("reports_dir and max_body_bytes must be set")
	}
	if c.ShutdownGrace <= 0 {
		add("shutdown_grace: %s must be positive: it bounds the drain of the requests in flight (default 15s)", c.ShutdownGrace)
	}
	if c.StreamIdleTimeout < time.Second {
		add("stream_idle_timeout: %s is too short: a slow reader pauses; use at least 1s (default 30s)", c.StreamIdleTimeout)
	}
	if err := checkLevel(c.LogLevel); err != nil {
		add("log_level: %v", err)
	}
	return errors.Join(errs...)
}

// Vendorctl is the operator CLI's configuration, from the environment and
// its flags only.
type Vendorctl struct {
	// AdminURL is the backend's admin listener. Default http://127.0.0.1:8082.
	AdminURL string `env:"VENDORCTL_ADMIN_URL"`
	// AdminToken is the backend's admin token.
	AdminToken string `env:"VENDORCTL_ADMIN_TOKEN" secret:"true"`
	// GatewayAdminURL is a gateway's admin listener, for the usage view.
	// Default http://127.0.0.1:9090.
	GatewayAdminURL string `env:"VENDORCTL_GATEWAY_ADMIN_URL"`
	// GatewayAdminToken is the gateway's admin token (usage commands only).
	GatewayAdminToken string `env:"VENDORCTL_GATEWAY_ADMIN_TOKEN" secret:"true"`
}

// DefaultVendorctl returns the documented defaults: the listeners' own
// defaults on this host.
func DefaultVendorctl() *Vendorctl {
	return &Vendorctl{AdminURL: "http://127.0.0.1:8082", GatewayAdminURL: "http://127.0.0.1:9090"}
}

// LoadVendorctl reads vendorctl's settings from env.
func LoadVendorctl(env Env) (*Vendorctl, error) {
	cfg := DefaultVendorctl()
	if _, err := load(cfg, "", env); err != nil {
		return nil, err
	}
	if err := checkHTTPURL(cfg.AdminURL); err != nil {
		return nil, fmt.Errorf("VENDORCTL_ADMIN_URL: %v", err)
	}
	if err := checkHTTPURL(cfg.GatewayAdminURL); err != nil {
		return nil, fmt.Errorf("VENDORCTL_GATEWAY_ADMIN_URL: %v", err)
	}
	if cfg.AdminToken == "" {
		return nil, errors.New("VENDORCTL_ADMIN_TOKEN is not set: export the backend's admin token")
	}
	return cfg, nil
}

// NamedAdminToken is one admin token and the name the audit trail gives
// whoever sends it.
type NamedAdminToken struct {
	Name, Token string
}

// DefaultAdminTokenName is the name of admin_token in the audit trail.
const DefaultAdminTokenName = "admin"

// NamedAdminTokens are the admin tokens: admin_token named "admin" when it
// is set, then admin_tokens. At least one is required.
func (c *Backend) NamedAdminTokens() ([]NamedAdminToken, error) {
	var out []NamedAdminToken
	if c.AdminToken != "" {
		if len(c.AdminToken) < 16 {
			return nil, errors.New("admin_token: set a secret of at least 16 characters (BACKEND_ADMIN_TOKEN) for vendorctl")
		}
		out = append(out, NamedAdminToken{Name: DefaultAdminTokenName, Token: c.AdminToken})
	}
	for i, e := range c.AdminTokens {
		name, tok, ok := strings.Cut(e, ":")
		switch {
		case !ok:
			return nil, fmt.Errorf("admin_tokens[%d]: write it name:token (BACKEND_ADMIN_TOKENS)", i)
		case !validTokenName(name):
			return nil, fmt.Errorf("admin_tokens[%d]: name %q must be 1-32 of a-z, 0-9, '.', '_', '-'", i, name)
		case len(tok) < 16:
			return nil, fmt.Errorf("admin_tokens[%d] (%s): set a secret of at least 16 characters", i, name)
		}
		for _, o := range out {
			if o.Name == name {
				return nil, fmt.Errorf("admin_tokens[%d]: the name %q is taken (admin_token is named %q)", i, name, DefaultAdminTokenName)
			}
			if o.Token == tok {
				return nil, fmt.Errorf("admin_tokens[%d] (%s): the same token as %s: each name needs its own", i, name, o.Name)
			}
		}
		out = append(out, NamedAdminToken{Name: name, Token: tok})
	}
	if len(out) == 0 {
		return nil, errors.New("admin_token: set a secret of at least 16 characters (BACKEND_ADMIN_TOKEN) for vendorctl, or named ones in admin_tokens")
	}
	return out, nil
}

func validTokenName(s string) bool {
	if len(s) == 0 || len(s) > 32 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
