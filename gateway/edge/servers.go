package edge

import "time"

// The sizes and timeouts of the gateway's own listeners that no setting
// names, each with its reason. The settings (config.Gateway) are what
// operators tune per deployment; these follow from the protocol and from
// the other settings.
const (
	// (The request head's bound is wire.MaxRequestHead, shared with the
	// backend's read buffer; reading a request is bounded by read_timeout.)
	// writeSlack is added to proxy.timeout for the write timeout: the
	// backend may take proxy.timeout to answer, the client this long more to
	// take the answer (a streamed report lifts it and is bounded by progress).
	writeSlack = 30 * time.Second
	// idleTimeout closes a keep-alive connection idle this long; shutdown
	// does not close idle connections, so it also bounds a drain.
	idleTimeout = 60 * time.Second

	// adminReadTimeout and adminIdleTimeout: the admin listener serves
	// scrapes and probes, short requests from a few clients.
	adminReadTimeout = 10 * time.Second
	adminIdleTimeout = 30 * time.Second
	// adminMaxBodyBytes: the admin endpoints take no body; fasthttp would
	// otherwise set aside memory for any announced up to 4 MiB, and wait
	// for it.
	adminMaxBodyBytes = 4 << 10

	// refusalLinger bounds the time spent on a connection refused by the
	// per-peer bounds: writing the 429, then reading what the client sent,
	// so that closing does not reset the connection before the client has
	// read the answer.
	refusalLinger = time.Second
	// maxRefusing bounds the refused connections lingering at once; past it
	// one is closed unanswered, so that a flood of refusals costs no more
	// than this many goroutines.
	maxRefusing = 256
)
