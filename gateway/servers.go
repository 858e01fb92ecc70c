package gateway

import "time"

// The sizes and timeouts of the gateway's own clients that no setting names
// (its listeners' are package edge's, its Redis pools package stores'),
// each with its reason. The settings (config.Gateway) are what operators tune per deployment; these follow
// from the protocol and from the other settings.
const (
	// lookupTimeoutMax caps one key lookup (proxy.timeout when shorter): a
	// request with a key not cached waits on it before anything else.
	lookupTimeoutMax = 2 * time.Second
	// lookupMaxConns bounds the key-lookup pool: the cache answers most
	// requests and concurrent lookups of one key are coalesced, so 64 covers
	// a cold start under load without a flood of new keys opening hundreds.
	lookupMaxConns = 64
	// proxyConnWait is how long a request waits for a free connection to
	// a backend once proxy.max_conns are in use: a full pool is overload,
	// answered 503 quickly.
	proxyConnWait = 100 * time.Millisecond
	// probeTimeoutMax caps a readiness probe of a backend (proxy.timeout
	// when shorter): /readyz should answer within a load balancer's probe.
	probeTimeoutMax = time.Second
	// probeInterval is the time between the starts of two readiness probes
	// of one dependency: at most one PING a second per gateway, and a hung
	// backend unready within probeInterval + its probe's timeout.
	probeInterval = time.Second

	// usageMaxPending bounds the usage flushes kept for a retry while the
	// store fails: an hour of them at the default usage.flush_interval
	// (5s); past it the oldest is dropped and counted.
	usageMaxPending = 720
)
