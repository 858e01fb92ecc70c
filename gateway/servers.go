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

	// usageMaxAge bounds how long a usage flush is kept for a retry while
	// its store fails: an hour, within the usage view's Redis memory of
	// applied flushes (2h) and the backend's (48h); past it the flush is
	// dropped and counted.
	usageMaxAge = time.Hour
	// usageMaxBytes bounds the memory of each usage store's retry queue
	// (the view's store, the backend's daily totals). While a store fails
	// its queue grows by about 100 bytes a vendor counted a minute (the
	// flushes held back are merged by minute): 32 MiB is the hour at 5,000
	// active vendors, five minutes at 60,000. Past it the oldest flushes
	// are dropped, the newest kept, and counted.
	usageMaxBytes = 32 << 20
)
