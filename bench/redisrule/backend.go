package main

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"vendorgate/shared/apikey"
	"vendorgate/shared/wire"
)

// mePath is the vendor route the load asks.
const mePath = "/api/vendor/v1/me"

// backend is the fixed backend the gateways call: a small JSON for the
// vendor route and the internal key lookup for the tool's keys, in the
// tool's process (it costs the same for every cell and both builds).
type backend struct {
	token   string
	signing string
	keys    []string       // keys[i] belongs to vendor i
	hashes  map[string]int // key hash -> vendor index
	me      []byte
	created time.Time
	srv     *http.Server
	addr    string
}

func newBackend(vendors int) (*backend, error) {
	tok, sec := make([]byte, 24), make([]byte, 32)
	if _, err := rand.Read(tok); err != nil {
		return nil, err
	}
	if _, err := rand.Read(sec); err != nil {
		return nil, err
	}
	b := &backend{token: hex.EncodeToString(tok), signing: hex.EncodeToString(sec), hashes: map[string]int{},
		created: time.Now().UTC().Truncate(time.Second)}
	signer, err := apikey.NewSigner([]string{b.signing})
	if err != nil {
		return nil, err
	}
	for i := 0; i < vendors; i++ {
		k, err := signer.Generate(apikey.DefaultPrefixes(), apikey.Sandbox)
		if err != nil {
			return nil, err
		}
		b.keys = append(b.keys, k)
		b.hashes[apikey.Hash(k)] = i
	}
	if b.me, err = json.Marshal(wire.Vendor{VendorID: vendorID(0), CompanyName: "Sweep Vendor", Environment: apikey.Sandbox,
		EnabledServices: wire.Services()}); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b.addr = ln.Addr().String()
	b.srv = &http.Server{Handler: b, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = b.srv.Serve(ln) }()
	return b, nil
}

func (b *backend) close() { _ = b.srv.Close() }

func (b *backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	switch {
	case r.URL.Path == mePath:
		_, _ = w.Write(b.me)
	case strings.HasPrefix(r.URL.Path, wire.KeyLookupPath):
		if subtle.ConstantTimeCompare([]byte(r.Header.Get(wire.HeaderInternalToken)), []byte(b.token)) != 1 {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":{"code":"invalid_api_key","message":"internal token required"}}`))
			return
		}
		i, ok := b.hashes[strings.TrimPrefix(r.URL.Path, wire.KeyLookupPath)]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":{"code":"not_found","message":"no key has that hash"}}`))
			return
		}
		_ = json.NewEncoder(w).Encode(wire.KeyResolution{KeyID: keyID(i), VendorID: vendorID(i), Environment: apikey.Sandbox,
			CreatedAt: b.created, ExpiresAt: b.created.Add(90 * 24 * time.Hour),
			Vendor: wire.VendorInfo{Status: wire.VendorApproved, CompanyName: "Sweep Vendor " + strconv.Itoa(i),
				EnabledServices: wire.Services()}})
	default:
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error":{"code":"not_found","message":"not found"}}`))
	}
}

func vendorID(i int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", i) }
func keyID(i int) string    { return fmt.Sprintf("00000000-0000-4000-9000-%012d", i) }

// gatewayConfig: every vendor may read far more than the load asks but
// vendor 0, held to 10 reads a minute, so that each cell also answers
// 429s. limit adds to the reads (see cell.limit): a daily quota far above
// the load (limitQuota), the reads row as a sliding window of 10 s
// (limitWindow: vendor 0's 10 a minute a window too), or a cap of 64
// reads of a vendor in flight at once (limitConcurrency; each vendor's
// client has one at a time, the cap's slot is given back off the answer's
// path).
func gatewayConfig(limit string) string {
	reads, policies := "{rate: 100000000, period: 1m}", ""
	switch limit {
	case limitQuota:
		policies = "\n  policies:\n    - {name: reads-day, scope: vendor, class: reads, kind: quota, rate: 1000000000, window: day}"
	case limitWindow:
		reads = "{kind: window, rate: 100000, period: 10s}"
	case limitConcurrency:
		policies = "\n  policies:\n    - {name: reads-at-once, scope: vendor, class: reads, kind: concurrency, rate: 64}"
	}
	return `# redisrule: the limiter runs on every request; vendor 0 is refused
limits:
  vendor:
    reads:  ` + reads + `
    orders: {rate: 100000000, period: 1m}
  overrides:
    "` + vendorID(0) + `":
      reads:  {rate: 10, period: 1m}
      orders: {rate: 10, period: 1m}` + policies + `
log_level: warn
`
}
