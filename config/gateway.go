package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"runtime"
	"strings"
	"time"

	"vendorgate/shared/apikey"
)

// Gateway is the gateway's whole configuration.
type Gateway struct {
	// Listen is the public address. Default ":8080".
	Listen string `yaml:"listen" env:"GATEWAY_LISTEN"`
	// AdminListen serves /metrics, /healthz, /readyz and the OpenAPI
	// document; never the public port. Default "127.0.0.1:9090".
	AdminListen string `yaml:"admin_listen" env:"GATEWAY_ADMIN_LISTEN"`
	// BackendURL is the backend's base URL; a comma-separated list balances
	// over several backends. Default "http://127.0.0.1:8081".
	BackendURL List `yaml:"backend_url" env:"GATEWAY_BACKEND_URL"`
	// InternalToken is sent to the backend on every call. Required.
	InternalToken string `yaml:"internal_token" env:"GATEWAY_INTERNAL_TOKEN" secret:"true"`
	// BackendTLS is the TLS of the calls to an https:// backend_url: the
	// CA that signs the backend's certificate and a client certificate for
	// mutual TLS. Empty: the system's roots, no client certificate.
	BackendTLS BackendTLS `yaml:"backend_tls"`
	// KeySigningSecrets verify the MAC every issued API key carries, so a
	// key the backend never issued is refused without a lookup: any of them
	// verifies. Each is at least 32 characters; the same list as the
	// backend's. Required.
	KeySigningSecrets List `yaml:"key_signing_secrets" env:"GATEWAY_KEY_SIGNING_SECRETS" secret:"true"`
	// KeyPrefixes are the key prefixes this server issues.
	KeyPrefixes Prefixes `yaml:"key_prefixes"`
	// PublicBaseURL is the gateway's own public address, as vendors reach
	// it: the curl lines of /docs and the OpenAPI document's servers entry.
	// Never taken from a request's Host header. Default
	// "http://localhost:8080"; the backend's public_base_url is the same.
	PublicBaseURL string `yaml:"public_base_url" env:"GATEWAY_PUBLIC_BASE_URL"`
	// Docs limits /docs, /openapi.yaml and /openapi.json per client address.
	Docs Docs `yaml:"docs"`
	// TLS serves the public listener over HTTPS; off without a certificate.
	TLS TLS `yaml:"tls"`
	// HTTPListen is an optional plain-HTTP address beside an HTTPS public
	// listener: it redirects / and /docs to PublicBaseURL (308) and refuses
	// any request under /api/ (400, never proxied). Default "" (none).
	HTTPListen string `yaml:"http_listen" env:"GATEWAY_HTTP_LISTEN"`
	// ProxyProtocol reads a PROXY protocol header (v1 or v2) at the start
	// of every connection from a trusted proxy (trusted_proxies), on the
	// public listener and http_listen: a load balancer that passes TLS
	// through (TCP mode) names the client's address in it, and the gateway
	// takes that address as the connection's peer, bounded by
	// MaxConnsPerPeer and MaxNewConnsPerPeer as a direct peer. A header
	// that names no client leaves the proxy's own address, and no
	// X-Forwarded-For is believed. A trusted proxy's connection without one
	// is refused; any other peer's is never read for one. Default false.
	ProxyProtocol bool `yaml:"proxy_protocol" env:"GATEWAY_PROXY_PROTOCOL"`

	Redis      Redis      `yaml:"redis"`
	Limits     Limits     `yaml:"limits"`
	InFlight   InFlight   `yaml:"in_flight"`
	FailedKeys FailedKeys `yaml:"failed_keys"`
	KeyCache   KeyCache   `yaml:"key_cache"`
	// KeyExpiryWarning: every answer to a key that expires within it
	// carries X-API-Key-Expiration, the key's expiry time, so that a vendor
	// sees it coming before 401 api_key_expired. Default 14d; at most 90d.
	KeyExpiryWarning time.Duration `yaml:"key_expiry_warning" env:"GATEWAY_KEY_EXPIRY_WARNING"`
	Proxy            Proxy         `yaml:"proxy"`
	TrustedProxies   List          `yaml:"trusted_proxies" env:"GATEWAY_TRUSTED_PROXIES"`
	// MaxBodyBytes is the ceiling of any request body: OrderBodyBytes is
	// capped at it. Default 1048576 (1 MiB).
	MaxBodyBytes int `yaml:"max_body_bytes" env:"GATEWAY_MAX_BODY_BYTES"`

	// What a client holds before it has shown a key. fasthttp sets aside a
	// request's announced Content-Length before the handler runs, so the
	// body limit is decided from the headers alone: only a POST whose
	// X-API-Key is well-formed and carries this deployment's MAC may send a
	// body (OrderBodyBytes); any other request may send none.
	//
	// OrderBodyBytes bounds the body of an order placement (413
	// payload_too_large past it), the only route that takes one. Default
	// 16384 (16 KiB): the largest valid order is about 4 KB of JSON with
	// escaped names. Capped at MaxBodyBytes (OrderBodyLimit).
	OrderBodyBytes int `yaml:"order_body_bytes" env:"GATEWAY_ORDER_BODY_BYTES"`
	// MaxConnsPerPeer is the most connections one TCP peer (an IPv4
	// address, an IPv6 /64) holds open at once; one more is answered 429
	// rate_limited and closed. Trusted proxies are exempt. Default 64: a
	// vendor within its limits needs a handful of keep-alive connections.
	MaxConnsPerPeer int `yaml:"max_conns_per_peer" env:"GATEWAY_MAX_CONNS_PER_PEER"`
	// MaxNewConnsPerPeer is the most new connections one TCP peer opens a
	// second (as many at once, then one every 1/MaxNewConnsPerPeer); one
	// more is answered 429 rate_limited and closed before it is read.
	// Trusted proxies are exempt. Default 100: a vendor within the default
	// read limit (2 a second) opens a few a second even without keep-alive,
	// while a peer that reopens connections faster than that costs an
	// accept, a request and a close each time whatever it holds open.
	MaxNewConnsPerPeer int `yaml:"max_new_conns_per_peer" env:"GATEWAY_MAX_NEW_CONNS_PER_PEER"`
	// MaxConns is the most connections the gateway holds open at once on
	// the public listener and http_listen together, whoever holds them
	// (trusted proxies included); one more is closed at accept, unanswered.
	// Each costs memory: an idle connection at most about 110 KB (it gives
	// its buffers back; 46 KB measured for a TLS one after a documentation
	// page). Default 1500: about 165 MB at that worst, within the shipped
	// 256 MiB pod.
	MaxConns int `yaml:"max_conns" env:"GATEWAY_MAX_CONNS"`
	// ReadTimeout bounds the reading of a request's headers, from its first
	// byte (a new connection's first byte must come within it of the
	// accept), and again of an order's
	// body (any other request's, at most one byte, is read within the
	// headers' bound). Default 10s.
	ReadTimeout time.Duration `yaml:"read_timeout" env:"GATEWAY_READ_TIMEOUT"`
	// KeylessIdleTimeout closes a keep-alive connection idle this long until
	// a request with a valid key has been served on it (a vendor's then
	// idles 60s). At least ReadTimeout, at most 60s. Default 10s.
	KeylessIdleTimeout time.Duration `yaml:"keyless_idle_timeout" env:"GATEWAY_KEYLESS_IDLE_TIMEOUT"`
	// ShutdownDelay keeps serving after SIGTERM while /readyz answers 503,
	// so a load balancer drains the replica before its listener closes.
	// Default 0 (set it to the balancer's probe interval, e.g. 5s).
	ShutdownDelay time.Duration `yaml:"shutdown_delay" env:"GATEWAY_SHUTDOWN_DELAY"`
	// ShutdownGrace bounds the drain on SIGTERM. Default 15s.
	ShutdownGrace time.Duration `yaml:"shutdown_grace" env:"GATEWAY_SHUTDOWN_GRACE"`
	// LogLevel is debug, info, warn or error. Default info.
	LogLevel string `yaml:"log_level" env:"GATEWAY_LOG_LEVEL"`
	// AccessLog bounds the access log's refusals in a flood.
	AccessLog AccessLog `yaml:"access_log"`
	// AdminToken guards the usage view (/usage on the admin listener) as a
	// bearer token; at least 16 characters. Empty turns the view off.
	AdminToken string `yaml:"admin_token" env:"GATEWAY_ADMIN_TOKEN" secret:"true"`
	Usage      Usage  `yaml:"usage"`

	// Version names this configuration (vendorgate_gateway_config_info):
	// the first 12 hex digits of the file's SHA-256, or "defaults" without
	// a file. LoadGateway sets it; it is not a setting.
	Version string `yaml:"-"`
}

// OrderBodyLimit is the body limit of an order placement in force:
// OrderBodyBytes, capped at MaxBodyBytes.
func (c *Gateway) OrderBodyLimit() int { return min(c.OrderBodyBytes, c.MaxBodyBytes) }

// Usage is the per-vendor usage counting behind the usage view.
type Usage struct {
	// FlushInterval is how often each gateway flushes its counts (to Redis,
	// where every replica's are summed; in process without Redis).
	// Default 5s; at most 1m, so that minute buckets stay meaningful.
	FlushInterval time.Duration `yaml:"flush_interval" env:"GATEWAY_USAGE_FLUSH_INTERVAL"`
}

// TLS is the public listener's certificates. TLS is on when CertFile (or
// any of Certificates) is set; the files are read at start (a key that
// does not match its certificate, or a file that cannot be read, stops
// the start and -check), again on SIGHUP, and whenever their content
// changes (WatchInterval).
type TLS struct {
	// CertFile is a PEM certificate with its chain (leaf first); KeyFile
	// its PEM private key. This certificate answers a client that sends no
	// server name (SNI).
	CertFile string `yaml:"cert_file" env:"GATEWAY_TLS_CERT_FILE"`
	KeyFile  string `yaml:"key_file" env:"GATEWAY_TLS_KEY_FILE"`
	// Certificates are more certificates, chosen by the server name a
	// client asks for (their DNS names, wildcards included). A name no
	// certificate covers is refused in the handshake.
	Certificates []CertFiles `yaml:"certificates"`
	// WatchInterval is how often the files are read again for a change of
	// content (a renewal written in place, a Kubernetes secret updated).
	// Default 30s; 0 turns watching off (SIGHUP still reloads).
	WatchInterval time.Duration `yaml:"watch_interval" env:"GATEWAY_TLS_WATCH_INTERVAL"`
	// MaxHandshakes bounds the TLS handshakes in progress across all
	// peers, counted from the ClientHello's arrival to the handshake's
	// end; a handshake past it waits (at most read_timeout) for a place.
	// Default 0: 16 per core (GOMAXPROCS), sized by HandshakeBudget.
	MaxHandshakes int `yaml:"max_handshakes" env:"GATEWAY_TLS_MAX_HANDSHAKES"`
	// MaxHandshakesPerSecond bounds the handshakes begun a second across
	// all peers (a burst of MaxHandshakes), so that a flood of new
	// connections leaves the CPU to requests on established ones. Default
	// 0: 200 per core, sized by HandshakeBudget: about a fifth of the CPU
	// with an RSA-2048 key (1.1 ms a handshake), a twentieth with ECDSA
	// P-256 (0.23 ms).
	MaxHandshakesPerSecond int `yaml:"max_handshakes_per_second" env:"GATEWAY_TLS_MAX_HANDSHAKES_PER_SECOND"`
	// ACME obtains and renews certificates for its domains from an ACME CA
	// (Let's Encrypt by default), beside or instead of the files.
	ACME ACME `yaml:"acme"`
}

// HandshakeBudget is the handshake budget in force: MaxHandshakes and
// MaxHandshakesPerSecond, or when 0 their defaults sized to the cores
// the process may use (GOMAXPROCS): 16 and 200 per core.
func (t TLS) HandshakeBudget() (inProgress, perSecond int) {
	cores := runtime.GOMAXPROCS(0)
	inProgress, perSecond = t.MaxHandshakes, t.MaxHandshakesPerSecond
	if inProgress == 0 {
		inProgress = 16 * cores
	}
	if perSecond == 0 {
		perSecond = 200 * cores
	}
	return inProgress, perSecond
}

// ACME is the certificates the gateway obtains and renews itself. The
// challenges are answered on the gateway's own listeners: TLS-ALPN-01 on
// the public one, HTTP-01 on http_listen when it is set.
type ACME struct {
	// Domains are the names to obtain certificates for (no wildcards: the
	// challenges served here cannot prove one). Empty: ACME is off.
	Domains List `yaml:"domains" env:"GATEWAY_TLS_ACME_DOMAINS"`
	// Email is the account's contact for the CA's expiry notices.
	Email string `yaml:"email" env:"GATEWAY_TLS_ACME_EMAIL"`
	// CA is the ACME directory URL. Default
	// "https://acme-v02.api.letsencrypt.org/directory" (LetsEncrypt, the
	// production directory).
	CA string `yaml:"ca" env:"GATEWAY_TLS_ACME_CA"`
	// CARootFile is a PEM file of roots to trust for the CA's own HTTPS
	// (a private CA); empty: the system's roots.
	CARootFile string `yaml:"ca_root_file" env:"GATEWAY_TLS_ACME_CA_ROOT_FILE"`
	// Storage is the directory of the account, certificates and locks.
	// Replicas that share it (a shared volume) share one certificate and
	// take turns renewing it; replicas with their own each order their
	// own, against the CA's rate limits. Required with Domains.
	Storage string `yaml:"storage" env:"GATEWAY_TLS_ACME_STORAGE"`
}

// BackendTLS is the gateway's side of TLS to the backend. The files are
// read at start (and by -check): one that cannot be read, holds no
// certificate, or a key that does not match its certificate stops both.
type BackendTLS struct {
	// CAFile is a PEM file of the CAs that sign the backend's certificate
	// (a private CA); empty: the system's roots.
	CAFile string `yaml:"ca_file" env:"GATEWAY_BACKEND_TLS_CA_FILE"`
	// CertFile and KeyFile are a PEM client certificate and its key, shown
	// to a backend that requires one (its tls.client_ca_file).
	CertFile string `yaml:"cert_file" env:"GATEWAY_BACKEND_TLS_CERT_FILE"`
	KeyFile  string `yaml:"key_file" env:"GATEWAY_BACKEND_TLS_KEY_FILE"`
}

// Set reports whether any of the files is named.
func (b BackendTLS) Set() bool { return b.CAFile != "" || b.CertFile != "" || b.KeyFile != "" }

func (b BackendTLS) validate(backends List) []error {
	var errs []error
	switch {
	case b.CertFile != "" && b.KeyFile == "":
		errs = append(errs, fmt.Errorf("backend_tls: cert_file %s has no key: set backend_tls.key_file (GATEWAY_BACKEND_TLS_KEY_FILE)", b.CertFile))
	case b.CertFile == "" && b.KeyFile != "":
		errs = append(errs, fmt.Errorf("backend_tls: key_file %s has no certificate: set backend_tls.cert_file (GATEWAY_BACKEND_TLS_CERT_FILE)", b.KeyFile))
	}
	if b.Set() {
		for _, u := range backends {
			if strings.HasPrefix(u, "http://") {
				errs = append(errs, fmt.Errorf("backend_tls: set, but backend_url %q is plain http: use https:// to the backend's TLS listener", u))
			}
		}
	}
	return errs
}

// LetsEncrypt is the default ACME directory.
const LetsEncrypt = "https://acme-v02.api.letsencrypt.org/directory"

// CertFiles is one certificate: its PEM chain and its PEM key.
type CertFiles struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// Enabled reports whether the public listener serves HTTPS.
func (t TLS) Enabled() bool {
	return t.CertFile != "" || t.KeyFile != "" || len(t.Certificates) > 0 || len(t.ACME.Domains) > 0
}

// Files is every certificate, the default (CertFile) first.
func (t TLS) Files() []CertFiles {
	var out []CertFiles
	if t.CertFile != "" || t.KeyFile != "" {
		out = append(out, CertFiles{CertFile: t.CertFile, KeyFile: t.KeyFile})
	}
	return append(out, t.Certificates...)
}

func (t TLS) validate() []error {
	if !t.Enabled() {
		return nil
	}
	var errs []error
	if t.CertFile == "" && t.KeyFile == "" && len(t.Certificates) > 0 {
		errs = append(errs, errors.New("tls: certificates are listed but tls.cert_file and tls.key_file (GATEWAY_TLS_CERT_FILE, GATEWAY_TLS_KEY_FILE) are not set: the default certificate answers clients that send no server name"))
	}
	for i, f := range t.Files() {
		name := "tls"
		if t.CertFile == "" && t.KeyFile == "" {
			name = fmt.Sprintf("tls.certificates[%d]", i)
		} else if i > 0 {
			name = fmt.Sprintf("tls.certificates[%d]", i-1)
		}
		switch {
		case f.CertFile == "" && f.KeyFile != "":
			errs = append(errs, fmt.Errorf("%s: key_file %s has no certificate: set %s.cert_file", name, f.KeyFile, name))
		case f.CertFile != "" && f.KeyFile == "":
			errs = append(errs, fmt.Errorf("%s: cert_file %s has no key: set %s.key_file", name, f.CertFile, name))
		}
	}
	if len(t.ACME.Domains) > 0 {
		if t.ACME.Storage == "" {
			errs = append(errs, errors.New("tls.acme.storage: set the directory of the ACME account and certificates (GATEWAY_TLS_ACME_STORAGE)"))
		}
		if u, err := url.Parse(t.ACME.CA); err != nil || u.Scheme != "https" || u.Host == "" {
			errs = append(errs, fmt.Errorf("tls.acme.ca: %q is not an https:// ACME directory URL", t.ACME.CA))
		}
		for _, d := range t.ACME.Domains {
			switch {
			case strings.Contains(d, "*") || strings.ContainsAny(d, "/: "):
				errs = append(errs, fmt.Errorf("tls.acme.domains: %q is not a DNS name the gateway can prove (no wildcards)", d))
			case !strings.Contains(d, "."):
				errs = append(errs, fmt.Errorf("tls.acme.domains: %q is not a name an ACME CA can reach: use a dotted name the CA resolves to this gateway "+
					"(api.example.com; to try ACME locally with Pebble, a name such as gateway.test that pebble-challtestsrv, as Pebble's DNS, resolves to 127.0.0.1)", d))
			}
		}
	}
	if t.WatchInterval < 0 || t.WatchInterval > 0 && t.WatchInterval < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("tls.watch_interval: %s must be 0 (off) or at least 100ms (default 30s)", t.WatchInterval))
	}
	if t.MaxHandshakes < 0 || t.MaxHandshakesPerSecond < 0 {
		errs = append(errs, fmt.Errorf("tls.max_handshakes (%d) and tls.max_handshakes_per_second (%d) must not be negative (0: 16 and 200 per core)",
			t.MaxHandshakes, t.MaxHandshakesPerSecond))
	}
	return errs
}

// Prefixes are the key prefixes of one deployment, one per environment.
type Prefixes struct {
	Sandbox string `yaml:"sandbox" env:"KEY_PREFIX_SANDBOX"`
	Live    string `yaml:"live" env:"KEY_PREFIX_LIVE"`
}

// APIKey converts p for the apikey package.
func (p Prefixes) APIKey() apikey.Prefixes { return apikey.Prefixes{Sandbox: p.Sandbox, Live: p.Live} }

// Redis configures the limiter's Redis. An empty URL selects the in-process
// limiter (a single gateway instance).
type Redis struct {
	// URL is redis://[:password@]host:port/db; several comma-separated
	// addresses (redis://h1:p1,redis://h2:p2) form a cluster.
	URL List `yaml:"url" env:"GATEWAY_REDIS_URL"`
	// MasterName selects Sentinel: the URLs are then the sentinels.
	MasterName string `yaml:"master_name" env:"GATEWAY_REDIS_MASTER_NAME"`
	// Timeout is how long a request waits on a silent Redis. Default 50ms:
	// past it, with no answer from Redis meanwhile, the request fails
	// closed with 503 instead of queueing behind a sick Redis.
	Timeout time.Duration `yaml:"timeout" env:"GATEWAY_REDIS_TIMEOUT"`
	// WireTimeout bounds one round trip to Redis on the wire (the socket
	// deadline of a pipelined batch); past it the round trip counts one
	// failure against the breaker. Default 500ms; below Timeout it is
	// Timeout. A node that gets its cores late must still read a reply
	// Redis sent in time.
	WireTimeout time.Duration `yaml:"wire_timeout" env:"GATEWAY_REDIS_WIRE_TIMEOUT"`
	// BusyTimeout is how long in all a request may wait for its limiter
	// call while Redis is visibly answering (the node is behind, not
	// Redis). Default 1s; below Timeout it is Timeout. Past it the request
	// is shed with 503 request_failed, never rate_limit_unavailable.
	BusyTimeout time.Duration `yaml:"busy_timeout" env:"GATEWAY_REDIS_BUSY_TIMEOUT"`
	// TickSlack is how late the gateway's 5ms scheduling tick may wake and
	// still count as on time. Only a node on time through the last second
	// calls a silent Redis down at Timeout; a late one (a CPU quota spent,
	// neighbours on every core) leaves it to WireTimeout. Default 2ms;
	// 100µs to Timeout.
	TickSlack time.Duration `yaml:"tick_slack" env:"GATEWAY_REDIS_TICK_SLACK"`
	// PoolSize is the connection pool size. Default 64.
	PoolSize int `yaml:"pool_size" env:"GATEWAY_REDIS_POOL_SIZE"`
	// BreakerOpenFor is how long the limiter's breaker stays open before it
	// probes Redis again. Default 2s.
	BreakerOpenFor time.Duration `yaml:"breaker_open_for" env:"GATEWAY_REDIS_BREAKER_OPEN_FOR"`
	// BreakerFailures is how many failed round trips to Redis (a pipelined
	// batch is one) within BreakerWindow open the breaker: in a row, or
	// making at least BreakerFailurePercent of the window's. Default 3.
	BreakerFailures int `yaml:"breaker_failures" env:"GATEWAY_REDIS_BREAKER_FAILURES"`
	// BreakerWindow is the rolling window of the failure share. Default 3s.
	// (breaker_failures failures in a row open it whenever they ended.)
	BreakerWindow time.Duration `yaml:"breaker_window" env:"GATEWAY_REDIS_BREAKER_WINDOW"`
	// BreakerFailurePercent is the share of failed round trips within the
	// window that opens the breaker. Default 50.
	BreakerFailurePercent int `yaml:"breaker_failure_percent" env:"GATEWAY_REDIS_BREAKER_FAILURE_PERCENT"`
	// Pipeline sends the limiter calls of concurrent requests to Redis in
	// one pipelined write (one round trip for many). Default true.
	Pipeline bool `yaml:"pipeline" env:"GATEWAY_REDIS_PIPELINE"`
	// PipelineMax bounds the limiter calls of one pipelined round trip.
	// Default 128.
	PipelineMax int `yaml:"pipeline_max" env:"GATEWAY_REDIS_PIPELINE_MAX"`
	// PipelineSenders is how many pipelined round trips may be in flight
	// at once. Default 2: on a small machine more senders mean smaller
	// batches.
	PipelineSenders int `yaml:"pipeline_senders" env:"GATEWAY_REDIS_PIPELINE_SENDERS"`
	// LeaseMax is the most tokens of one bucket a limiter call takes: the
	// request's own and a lease of the rest, which this gateway then
	// spends without asking Redis. Default 16; 1 turns leases off (every
	// request asks Redis: strictly exact). Leases need Pipeline. Reloaded
	// on SIGHUP.
	LeaseMax int `yaml:"lease_max" env:"GATEWAY_REDIS_LEASE_MAX"`
	// LeaseTTL is how long a lease lives; what is left then goes back to
	// Redis. With leases, admissions stay within what GCRA allows with a
	// burst of burst + ceil(rate × LeaseTTL). Default 2s. Reloaded on
	// SIGHUP.
	LeaseTTL time.Duration `yaml:"lease_ttl" env:"GATEWAY_REDIS_LEASE_TTL"`
	// SlotTTL is how long a slot of a concurrency policy lives without a
	// refresh: the slots a dead gateway held are free within it. Default
	// 15s.
	SlotTTL time.Duration `yaml:"slot_ttl" env:"GATEWAY_REDIS_SLOT_TTL"`
	// SlotRefresh is how often a gateway renews the expiry of the slots it
	// holds; below SlotTTL. Default 5s.
	SlotRefresh time.Duration `yaml:"slot_refresh" env:"GATEWAY_REDIS_SLOT_REFRESH"`
}

// FailedKeys is the failed-key throttle: past PerAddress failures from one
// client address, or PerKey failures of one presented key, within Window,
// the answer is 429 instead of 401.
type FailedKeys struct {
	PerAddress int           `yaml:"per_address" env:"GATEWAY_FAILED_KEYS_PER_ADDRESS"`
	PerKey     int           `yaml:"per_key" env:"GATEWAY_FAILED_KEYS_PER_KEY"`
	Window     time.Duration `yaml:"window" env:"GATEWAY_FAILED_KEYS_WINDOW"`
	// MaxTracked bounds the in-process counts (no Redis configured, or
	// while the throttle counts in process): at most this many addresses
	// (an IPv6 /64 counts as one) and, apart, as many keys; past it the
	// oldest windows are dropped first. Read at start. Default 100000.
	MaxTracked int `yaml:"max_tracked" env:"GATEWAY_FAILED_KEYS_MAX_TRACKED"`
	// RedisPoolSize is the throttle's own Redis connections (apart from the
	// limiter's pool), and the most of its calls in flight at once: a
	// failed key that finds them all in use is counted in process, never
	// queued, for redis.breaker_open_for. Read at start. Default 8.
	RedisPoolSize int `yaml:"redis_pool_size" env:"GATEWAY_FAILED_KEYS_REDIS_POOL_SIZE"`
}

// Docs is the per-address limit of the documentation routes, kept in
// process (documentation is not worth a Redis call): past Rate requests in
// Window from one client address, the answer is 429 rate_limited.
type Docs struct {
	// Rate is the requests allowed per Window. Default 60.
	Rate int `yaml:"rate" env:"GATEWAY_DOCS_RATE"`
	// Window is the period of Rate. Default 1m.
	Window time.Duration `yaml:"window" env:"GATEWAY_DOCS_WINDOW"`
}

// AccessLog bounds the access log in a flood of refusals (an outage
// answers every request 503): every answer without an error code is
// logged, and so are the answers with one, up to RefusalsPerSecond of each
// code a second; past it, the refusals of that code are counted and
// written as one summary line per code, status and route each
// SummaryInterval. The request metrics count every answer either way.
type AccessLog struct {
	// RefusalsPerSecond is the answers of one error code logged in full
	// each second; the same rate bounds the plain listener's WARN lines of
	// API keys sent in clear text. Default 100; 0 logs every one.
	RefusalsPerSecond int `yaml:"refusals_per_second" env:"GATEWAY_ACCESS_LOG_REFUSALS_PER_SECOND"`
	// SummaryInterval is how often the refusals past the rate are written
	// as summary lines. Default 10s.
	SummaryInterval time.Duration `yaml:"summary_interval" env:"GATEWAY_ACCESS_LOG_SUMMARY_INTERVAL"`
}

// KeyCache bounds the in-process key cache.
type KeyCache struct {
	// Size is the most entries kept. Default 100000.
	Size int `yaml:"size" env:"GATEWAY_KEY_CACHE_SIZE"`
	// TTL of a resolved key. Default 30s: the staleness bound without Redis,
	// or while the invalidation subscription is broken.
	TTL time.Duration `yaml:"ttl" env:"GATEWAY_KEY_CACHE_TTL"`
	// PushedTTL of a working key cached while the backend's invalidations
	// reach the gateway through Redis: a revocation drops it at once, so it
	// lives long, and is refreshed in the background before it expires. A
	// gap in the subscription shortens it to TTL. Default 15m, also when 0
	// (InForce); at least TTL.
	PushedTTL time.Duration `yaml:"pushed_ttl" env:"GATEWAY_KEY_CACHE_PUSHED_TTL"`
	// NegativeTTL of an unknown key. Default 5s.
	NegativeTTL time.Duration `yaml:"negative_ttl" env:"GATEWAY_KEY_CACHE_NEGATIVE_TTL"`
	// NegativeSize is the most unknown and revoked keys kept, in a cache of
	// their own so that they never evict a working key. Default 0: a tenth
	// of Size, at least 64 (InForce).
	NegativeSize int `yaml:"negative_size" env:"GATEWAY_KEY_CACHE_NEGATIVE_SIZE"`
}

// InForce is the cache's bounds as they apply: a NegativeSize of 0 is a
// tenth of Size (at least 64, one entry for each of the cache's locks), a
// PushedTTL of 0 the default (at least TTL).
func (k KeyCache) InForce() KeyCache {
	if k.NegativeSize == 0 {
		k.NegativeSize = max(64, k.Size/10)
	}
	if k.PushedTTL == 0 {
		k.PushedTTL = max(DefaultGateway().KeyCache.PushedTTL, k.TTL)
	}
	return k
}

// Proxy configures calls to the backend.
type Proxy struct {
	// Timeout bounds one backend call; past it the answer is 504. Default 10s.
	Timeout time.Duration `yaml:"timeout" env:"GATEWAY_PROXY_TIMEOUT"`
	// MaxConns bounds the connections to each backend. Default 512.
	MaxConns int `yaml:"max_conns" env:"GATEWAY_PROXY_MAX_CONNS"`
	// BreakerOpenFor is how long a backend's breaker stays open. Default 5s.
	BreakerOpenFor time.Duration `yaml:"breaker_open_for" env:"GATEWAY_PROXY_BREAKER_OPEN_FOR"`
	// BreakerFailures is how many consecutive failures open it. Default 5.
	BreakerFailures int `yaml:"breaker_failures" env:"GATEWAY_PROXY_BREAKER_FAILURES"`
	// StreamIdleTimeout bounds a streamed report by progress, not as a
	// whole: past it with no byte read from the backend or taken by the
	// client, the download is cut (the client sees a body short of its
	// Content-Length). Timeout still bounds the wait for the report to
	// begin. Default 30s.
	StreamIdleTimeout time.Duration `yaml:"stream_idle_timeout" env:"GATEWAY_PROXY_STREAM_IDLE_TIMEOUT"`
	// StreamMaxConns bounds the connections to each backend that report
	// downloads use, a pool apart from MaxConns: downloads held open, however
	// many, never take the connection a read or an order needs. Default 128.
	StreamMaxConns int `yaml:"stream_max_conns" env:"GATEWAY_PROXY_STREAM_MAX_CONNS"`
	// StreamMinRate is the least a report download must move, in bytes a
	// second, over each StreamMinRateWindow after StreamMinRateGrace: a
	// download below it is cut (the client sees a body short of its
	// Content-Length), whichever side is slow, so that a client taking a few
	// bytes now and then cannot hold a download, its slot and its backend
	// connection for hours. Default 4096 (32 kbit/s); 0 turns it off.
	StreamMinRate int `yaml:"stream_min_rate" env:"GATEWAY_PROXY_STREAM_MIN_RATE"`
	// StreamMinRateWindow is the span over which StreamMinRate is judged:
	// each window after the grace must move StreamMinRate × the window.
	// Default 30s.
	StreamMinRateWindow time.Duration `yaml:"stream_min_rate_window" env:"GATEWAY_PROXY_STREAM_MIN_RATE_WINDOW"`
	// StreamMinRateGrace is how long a download runs before its rate is
	// judged (a connection's slow start). Default 10s.
	StreamMinRateGrace time.Duration `yaml:"stream_min_rate_grace" env:"GATEWAY_PROXY_STREAM_MIN_RATE_GRACE"`
}

// DefaultGateway returns the documented defaults.
func DefaultGateway() *Gateway {
	return &Gateway{
		Listen:        ":8080",
		AdminListen:   "127.0.0.1:9090",
		BackendURL:    List{"http://127.0.0.1:8081"},
		KeyPrefixes:   Prefixes{Sandbox: apikey.DefaultSandboxPrefix, Live: apikey.DefaultLivePrefix},
		PublicBaseURL: "http://localhost:8080",
		Docs:          Docs{Rate: 60, Window: time.Minute},
		TLS:           TLS{WatchInterval: 30 * time.Second, ACME: ACME{CA: LetsEncrypt}},
		Redis: Redis{Timeout: 50 * time.Millisecond, WireTimeout: 500 * time.Millisecond, BusyTimeout: time.Second, TickSlack: 2 * time.Millisecond,
			PoolSize: 64, BreakerOpenFor: 2 * time.Second, BreakerFailures: 3, BreakerWindow: 3 * time.Second, BreakerFailurePercent: 50,
			Pipeline: true, PipelineMax: 128, PipelineSenders: 2, LeaseMax: 16, LeaseTTL: 2 * time.Second,
			SlotTTL: 15 * time.Second, SlotRefresh: 5 * time.Second},
		Limits:           defaultLimits(),
		InFlight:         defaultInFlight(),
		FailedKeys:       FailedKeys{PerAddress: 100, PerKey: 10, Window: 10 * time.Minute, MaxTracked: 100_000, RedisPoolSize: 8},
		KeyCache:         KeyCache{Size: 100000, TTL: 30 * time.Second, PushedTTL: 15 * time.Minute, NegativeTTL: 5 * time.Second},
		KeyExpiryWarning: 14 * 24 * time.Hour,
		Proxy: Proxy{Timeout: 10 * time.Second, MaxConns: 512, BreakerOpenFor: 5 * time.Second, BreakerFailures: 5, StreamIdleTimeout: 30 * time.Second,
			StreamMaxConns: 128, StreamMinRate: 4096, StreamMinRateWindow: 30 * time.Second, StreamMinRateGrace: 10 * time.Second},
		MaxBodyBytes:  1 << 20,
		ShutdownGrace: 15 * time.Second,
		LogLevel:      "info",
		AccessLog:     AccessLog{RefusalsPerSecond: 100, SummaryInterval: 10 * time.Second},
		Usage:         Usage{FlushInterval: 5 * time.Second},
		Version:       DefaultsVersion,

		// Client bounds.
		OrderBodyBytes:     16 << 10,
		MaxConnsPerPeer:    64,
		MaxNewConnsPerPeer: 100,
		MaxConns:           1500,
		ReadTimeout:        10 * time.Second,
		KeylessIdleTimeout: 10 * time.Second,
	}
}

// LoadGateway reads the gateway's configuration: defaults, the file at path
// (none when empty), the environment, then Validate.
func LoadGateway(path string, env Env) (*Gateway, error) {
	cfg := DefaultGateway()
	version, err := load(cfg, path, prefixed(env, "GATEWAY_"))
	if err != nil {
		return nil, err
	}
	cfg.Version = version
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// Warnings are settings that load and validate but are likely a mistake:
// the start logs each and -check prints each, and neither refuses them.
func (c *Gateway) Warnings() []string {
	var out []string
	if c.TLS.Enabled() && strings.HasPrefix(c.PublicBaseURL, "http://") {
		out = append(out, fmt.Sprintf("public_base_url: %q is http:// while tls serves HTTPS on listen: every order's Location and poll.url, "+
			"the /docs curl lines and the OpenAPI servers entry name a scheme the listener does not speak; set the https:// address (GATEWAY_PUBLIC_BASE_URL)", c.PublicBaseURL))
	}
	return out
}

// Validate checks every setting and says what to change.
func (c *Gateway) Validate() error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if err := checkListen(c.Listen); err != nil {
		add("listen: %v", err)
	}
	if err := checkListen(c.AdminListen); err != nil {
		add("admin_listen: %v", err)
	}
	if len(c.BackendURL) == 0 {
		add("backend_url: set at least one backend URL (GATEWAY_BACKEND_URL)")
	}
	for _, u := range c.BackendURL {
		if err := checkHTTPURL(u); err != nil {
			add("backend_url: %v", err)
		}
	}
	if len(c.InternalToken) < 16 {
		add("internal_token: set a shared secret of at least 16 characters (GATEWAY_INTERNAL_TOKEN), the same as the backend's")
	}
	errs = append(errs, c.BackendTLS.validate(c.BackendURL)...)
	if err := checkSigningSecrets(c.KeySigningSecrets, c.InternalToken, "GATEWAY_KEY_SIGNING_SECRETS", "backend's"); err != nil {
		add("key_signing_secrets: %v", err)
	}
	if err := c.KeyPrefixes.APIKey().Validate(); err != nil {
		add("key_prefixes: %v", err)
	}
	if err := checkHTTPURL(c.PublicBaseURL); err != nil {
		add("public_base_url: %v; set the gateway's public address (GATEWAY_PUBLIC_BASE_URL), e.g. https://api.example.com", err)
	} else if u, _ := url.Parse(c.PublicBaseURL); u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.Fragment != "" {
		add("public_base_url: %q must not have a path, query or fragment", c.PublicBaseURL)
	}
	errs = append(errs, c.TLS.validate()...)
	if c.HTTPListen != "" {
		if err := checkListen(c.HTTPListen); err != nil {
			add("http_listen: %v", err)
		} else if c.HTTPListen == c.Listen || c.HTTPListen == c.AdminListen {
			add("http_listen: %q is already listen or admin_listen", c.HTTPListen)
		}
		if !strings.HasPrefix(c.PublicBaseURL, "https://") {
			add("http_listen: it redirects to public_base_url, which is %q: set an https:// public_base_url (GATEWAY_PUBLIC_BASE_URL)", c.PublicBaseURL)
		}
	}
	if c.ProxyProtocol && len(c.TrustedProxies) == 0 {
		add("proxy_protocol: list the load balancers that send the PROXY header in trusted_proxies (GATEWAY_TRUSTED_PROXIES); no other peer's header is read")
	}
	if c.Docs.Rate <= 0 || c.Docs.Window <= 0 {
		add("docs.rate and docs.window must be positive (default 60 a minute per client address)")
	}
	for _, u := range c.Redis.URL {
		if _, err := url.Parse(u); err != nil || !strings.HasPrefix(u, "redis://") && !strings.HasPrefix(u, "rediss://") {
			add("redis.url: %q is not a redis:// URL", RedactURL(u))
		}
	}
	if c.Redis.Timeout <= 0 || c.Redis.Timeout > 5*time.Second {
		add("redis.timeout: %s must be between 1ms and 5s (tens of milliseconds is usual)", c.Redis.Timeout)
	}
	if c.Redis.PoolSize <= 0 {
		add("redis.pool_size must be positive")
	}
	if c.Redis.WireTimeout <= 0 || c.Redis.WireTimeout > 10*time.Second {
		add("redis.wire_timeout: %s must be between 1ms and 10s (below redis.timeout it is redis.timeout)", c.Redis.WireTimeout)
	}
	if c.Redis.BusyTimeout <= 0 || c.Redis.BusyTimeout > 30*time.Second {
		add("redis.busy_timeout: %s must be between 1ms and 30s (below redis.timeout it is redis.timeout)", c.Redis.BusyTimeout)
	}
	if c.Redis.TickSlack < 100*time.Microsecond || c.Redis.TickSlack > c.Redis.Timeout {
		add("redis.tick_slack: %s must be between 100µs and redis.timeout (a millisecond or two is usual)", c.Redis.TickSlack)
	}
	if c.Redis.BreakerOpenFor <= 0 || c.Redis.BreakerFailures <= 0 || c.Redis.BreakerWindow <= 0 {
		add("redis.breaker_open_for, redis.breaker_failures and redis.breaker_window must be positive")
	}
	if c.Redis.PipelineMax < 1 || c.Redis.PipelineMax > 10_000 {
		add("redis.pipeline_max: %d must be between 1 and 10000", c.Redis.PipelineMax)
	}
	if c.Redis.PipelineSenders < 1 || c.Redis.PipelineSenders > 64 {
		add("redis.pipeline_senders: %d must be between 1 and 64", c.Redis.PipelineSenders)
	}
	if c.Redis.LeaseMax < 1 || c.Redis.LeaseMax > 1000 {
		add("redis.lease_max: %d must be between 1 (no leases: every request asks Redis) and 1000", c.Redis.LeaseMax)
	}
	if c.Redis.LeaseTTL < 10*time.Millisecond || c.Redis.LeaseTTL > time.Minute {
		add("redis.lease_ttl: %s must be between 10ms and 1m (admissions may exceed the limit by rate × lease_ttl)", c.Redis.LeaseTTL)
	}
	if c.Redis.SlotTTL < time.Second || c.Redis.SlotTTL > 10*time.Minute {
		add("redis.slot_ttl: %s must be between 1s and 10m (a dead gateway's concurrency slots are freed within it)", c.Redis.SlotTTL)
	}
	if c.Redis.SlotRefresh < 100*time.Millisecond || c.Redis.SlotRefresh > c.Redis.SlotTTL/2 {
		add("redis.slot_refresh: %s must be between 100ms and half of redis.slot_ttl (%s), so that a missed refresh frees no slot held", c.Redis.SlotRefresh, c.Redis.SlotTTL)
	}
	if c.Redis.BreakerFailurePercent < 1 || c.Redis.BreakerFailurePercent > 100 {
		add("redis.breaker_failure_percent: %d must be between 1 and 100", c.Redis.BreakerFailurePercent)
	}
	errs = append(errs, c.Limits.validate()...)
	errs = append(errs, c.InFlight.validate()...)
	if c.FailedKeys.PerAddress <= 0 || c.FailedKeys.PerKey <= 0 || c.FailedKeys.Window <= 0 {
		add("failed_keys: per_address, per_key and window must be positive")
	}
	if c.FailedKeys.MaxTracked <= 0 {
		add("failed_keys.max_tracked must be positive (the default 100000 takes about 20 MB per map when full)")
	}
	if c.FailedKeys.RedisPoolSize <= 0 || c.FailedKeys.RedisPoolSize > 1024 {
		add("failed_keys.redis_pool_size: %d must be between 1 and 1024 (default 8)", c.FailedKeys.RedisPoolSize)
	}
	if c.KeyCache.Size <= 0 || c.KeyCache.TTL <= 0 || c.KeyCache.NegativeTTL <= 0 {
		add("key_cache: size, ttl and negative_ttl must be positive")
	}
	if c.KeyExpiryWarning <= 0 || c.KeyExpiryWarning > 90*24*time.Hour {
		add("key_expiry_warning: %s must be more than 0 and at most 90d (default 14d)", c.KeyExpiryWarning)
	}
	if c.KeyCache.PushedTTL != 0 && c.KeyCache.PushedTTL < c.KeyCache.TTL {
		add("key_cache.pushed_ttl (%s) must be at least key_cache.ttl (%s)", c.KeyCache.PushedTTL, c.KeyCache.TTL)
	}
	if c.KeyCache.NegativeSize < 0 {
		add("key_cache.negative_size must not be negative (0: a tenth of key_cache.size)")
	}
	if c.Proxy.Timeout <= 0 || c.Proxy.MaxConns <= 0 || c.Proxy.BreakerOpenFor <= 0 || c.Proxy.BreakerFailures <= 0 {
		add("proxy: timeout, max_conns, breaker_open_for and breaker_failures must be positive")
	}
	if c.Proxy.StreamIdleTimeout < time.Second {
		add("proxy.stream_idle_timeout: %s is too short: a slow client pauses; use at least 1s (default 30s)", c.Proxy.StreamIdleTimeout)
	}
	if c.Proxy.StreamMaxConns <= 0 {
		add("proxy.stream_max_conns must be positive (default 128 report downloads at once to each backend)")
	}
	if c.Proxy.StreamMinRate < 0 {
		add("proxy.stream_min_rate: %d bytes a second must not be negative (0 turns the floor off; default 4096)", c.Proxy.StreamMinRate)
	}
	if c.Proxy.StreamMinRate > 0 && (c.Proxy.StreamMinRateWindow < 100*time.Millisecond || c.Proxy.StreamMinRateGrace < 0) {
		add("proxy.stream_min_rate_window must be at least 100ms and proxy.stream_min_rate_grace not negative (defaults 30s and 10s)")
	}
	if _, err := ParseCIDRs(c.TrustedProxies); err != nil {
		add("trusted_proxies: %v", err)
	}
	if c.MaxBodyBytes <= 0 {
		add("max_body_bytes must be positive")
	}
	// Client bounds.
	if c.OrderBodyBytes <= 0 {
		add("order_body_bytes must be positive (default 16384)")
	}
	if c.MaxConnsPerPeer <= 0 {
		add("max_conns_per_peer must be positive (default 64; list a load balancer in trusted_proxies to exempt it)")
	}
	if c.MaxNewConnsPerPeer <= 0 {
		add("max_new_conns_per_peer must be positive, new connections a second (default 100; list a load balancer in trusted_proxies to exempt it)")
	}
	if c.MaxConns <= 0 {
		add("max_conns must be positive, connections open at once (default 1500: size it to memory, about 110 KB a connection at worst)")
	}
	if c.ReadTimeout < time.Second || c.ReadTimeout > 5*time.Minute {
		add("read_timeout: %s must be between 1s and 5m (default 10s)", c.ReadTimeout)
	}
	if c.KeylessIdleTimeout < c.ReadTimeout || c.KeylessIdleTimeout > time.Minute {
		add("keyless_idle_timeout: %s must be between read_timeout (%s) and 1m (default 10s)", c.KeylessIdleTimeout, c.ReadTimeout)
	}
	if c.ShutdownGrace <= 0 {
		add("shutdown_grace: %s must be positive: it bounds the drain of the requests in flight (default 15s)", c.ShutdownGrace)
	}
	if c.ShutdownDelay < 0 || c.ShutdownDelay > time.Minute {
		add("shutdown_delay: %s must be between 0 and 1m", c.ShutdownDelay)
	}
	if err := checkLevel(c.LogLevel); err != nil {
		add("log_level: %v", err)
	}
	if c.AccessLog.RefusalsPerSecond < 0 {
		add("access_log.refusals_per_second: %d must not be negative (default 100; 0 logs every refusal)", c.AccessLog.RefusalsPerSecond)
	}
	if c.AccessLog.SummaryInterval < time.Second || c.AccessLog.SummaryInterval > 5*time.Minute {
		add("access_log.summary_interval: %s must be between 1s and 5m (default 10s)", c.AccessLog.SummaryInterval)
	}
	if c.AdminToken != "" && len(c.AdminToken) < 16 {
		add("admin_token: use at least 16 characters (GATEWAY_ADMIN_TOKEN), or leave it empty to turn the usage view off")
	}
	if c.Usage.FlushInterval <= 0 || c.Usage.FlushInterval > time.Minute || time.Minute%c.Usage.FlushInterval != 0 {
		add("usage.flush_interval: %s must divide a minute (1s, 5s, 10s, 30s, 1m)", c.Usage.FlushInterval)
	}
	return errors.Join(errs...)
}

// ParseCIDRs parses trusted proxy ranges; a bare address is a /32 or /128.
func ParseCIDRs(list []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(list))
	for _, s := range list {
		if !strings.Contains(s, "/") {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("%q is not an address or CIDR", s)
			}
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR", s)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

func checkListen(addr string) error {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("%q is not host:port", addr)
	}
	return nil
}

func checkHTTPURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an http:// URL", s)
	}
	return nil
}

func checkLevel(s string) error {
	switch s {
	case "debug", "info", "warn", "error":
		return nil
	}
	return fmt.Errorf("%q is not one of debug, info, warn, error", s)
}

// prefixed lets the shared Prefixes struct read GATEWAY_KEY_PREFIX_* or
// BACKEND_KEY_PREFIX_*: a tag without the binary's prefix gets it added.
func prefixed(env Env, prefix string) Env {
	if env == nil {
		env = lookupEnv
	}
	return func(name string) (string, bool) {
		if strings.HasPrefix(name, "KEY_PREFIX_") {
			name = prefix + name
		}
		return env(name)
	}
}
