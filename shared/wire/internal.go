package wire

import "time"

// Headers the gateway sets on every proxied call. The gateway removes any
// copy a client sent before setting them; the backend trusts them only with
// a valid internal token.
const (
	HeaderInternalToken = "X-Internal-Token"
	HeaderVendorID      = "X-Vendor-Id"
	HeaderKeyID         = "X-Key-Id"
	HeaderEnvironment   = "X-Vendor-Environment"
	HeaderRequestID     = "X-Request-Id"
	HeaderForwardedFor  = "X-Forwarded-For"
	HeaderAPIKey        = "X-API-Key"
	HeaderIdempotency   = "Idempotency-Key"
)

// MaxRequestHead is the one bound on a vendor request's line and headers,
// enforced at the gateway (its read buffer: past it, 431 before the key is
// looked at or a limit charged). The backend reads what the gateway
// forwards with BackendReadBuffer.
const MaxRequestHead = 8 << 10

// BackendReadBuffer is the backend's read buffer (fasthttp's ReadBufferSize,
// which bounds the request line and headers; fasthttp's default is 4 KiB).
// It holds the largest head the gateway accepts plus the identity headers
// the gateway adds (internal token, vendor, key, environment, request id,
// forwarded-for: well under 1 KiB with the longest ids): with the 4 KiB
// default, a vendor's 300 headers or 6 KB query passed the gateway, were
// charged, and the backend answered 400.
const BackendReadBuffer = MaxRequestHead + 4<<10

// IdentityHeaders are the headers only the gateway may set.
func IdentityHeaders() []string {
	return []string{HeaderInternalToken, HeaderVendorID, HeaderKeyID, HeaderEnvironment}
}

// KeyLookupPath is the backend's internal endpoint that resolves a key by
// the hex SHA-256 of the whole key: GET KeyLookupPath + hash, with the
// internal token. 200 with KeyResolution, 404 when no key has that hash.
const KeyLookupPath = "/internal/v1/keys/"

// ReadyPath is the backend's readiness on its internal listener, for the
// gateway's prober: GET with the internal token; 200 when ready, 503 when
// not (its database unreachable). Same checks and body as its /readyz.
const ReadyPath = "/internal/v1/ready"

// KeyResolution is what the gateway learns about a key and its vendor.
type KeyResolution struct {
	KeyID       string     `json:"key_id"`
	VendorID    string     `json:"vendor_id"`
	Environment string     `json:"environment"`
	CreatedAt   time.Time  `json:"created_at"`
	ExpiresAt   time.Time  `json:"expires_at"`
	RevokedAt   *time.Time `json:"revoked_at"`
	// RevokeAt is when a rotation revokes the key, the end of its
	// overlap: from then on the gateway refuses it as revoked, whether or
	// not the revocation's publish reached it. Absent when none is
	// scheduled.
	RevokeAt *time.Time `json:"revoke_at,omitempty"`
	Vendor   VendorInfo `json:"vendor"`
}

// VendorInfo is the part of a vendor the gateway needs to admit a call.
type VendorInfo struct {
	Status          string   `json:"status"`
	CompanyName     string   `json:"company_name"`
	EnabledServices []string `json:"enabled_services"`
}

// InvalidationChannel is the Redis pub/sub channel on which the backend
// announces changes that gateways cache.
const InvalidationChannel = "vendorgate:invalidate"

// Invalidation is one message on InvalidationChannel. Exactly one of
// KeyHash (a key was revoked) or VendorID (a vendor's status or services
// changed: drop every key of that vendor) is set.
type Invalidation struct {
	KeyHash  string `json:"key_hash,omitempty"`
	VendorID string `json:"vendor_id,omitempty"`
}
