package gateway

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"vendorgate/shared/apierr"
	"vendorgate/shared/wire"
)

func TestHappyPathCarriesIdentity(t *testing.T) {
	_, gw, key, res := startWithKey(t)
	a := do(t, "GET", gw.url+"/api/vendor/v1/me", key)
	if a.status != 200 {
		t.Fatalf("status %d %s", a.status, a.body)
	}
	a.wantCommon(t)
	if a.echo[wire.HeaderVendorID] != res.VendorID || a.echo[wire.HeaderKeyID] != res.KeyID || a.echo[wire.HeaderEnvironment] != "sandbox" {
		t.Fatalf("identity not asserted: %v", a.echo)
	}
	if _, ok := a.echo[wire.HeaderAPIKey]; ok {
		t.Fatal("the API key reached the backend")
	}
	if a.echo[wire.HeaderRequestID] != a.header.Get("X-Request-Id") {
		t.Fatalf("request id %q to backend, %q to client", a.echo[wire.HeaderRequestID], a.header.Get("X-Request-Id"))
	}
	if a.header.Get("Location") == "" || a.header.Get("Retry-After") != "7" {
		t.Fatalf("Location/Retry-After not passed through: %v", a.header)
	}
	if a.header.Get("RateLimit-Policy") != `"reads";q=5;w=60` || a.header.Get("RateLimit") != `"reads";r=4;t=12` {
		t.Fatalf("RateLimit headers: %q %q", a.header.Get("RateLimit-Policy"), a.header.Get("RateLimit"))
	}
	_ = http.StatusOK
	_ = apierr.NotFound
}

func TestRouting(t *testing.T) {
	b, gw, key, _ := startWithKey(t)
	for _, k := range []string{"", key} {
		do(t, "GET", gw.url+"/api/vendor/v1/nope", k).wantError(t, 404, apierr.NotFound)
		do(t, "GET", gw.url+"/api/vendor/v2/me", k).wantError(t, 404, apierr.NotFound)
		do(t, "GET", gw.url+"/api/vendor/v1/me/", k).wantError(t, 404, apierr.NotFound) // no redirect
		do(t, "GET", gw.url+"/API/vendor/v1/me", k).wantError(t, 404, apierr.NotFound)  // no case folding
		do(t, "GET", gw.url+"/", k).wantError(t, 404, apierr.NotFound)
		do(t, "GET", gw.url+"/internal/v1/keys/abc", k).wantError(t, 404, apierr.NotFound)
	}
	a := do(t, "POST", gw.url+"/api/vendor/v1/me", key)
	a.wantError(t, 405, apierr.MethodNotAllowed)
	if a.header.Get("Allow") != "GET" {
		t.Fatalf("Allow %q", a.header.Get("Allow"))
	}
	a = do(t, "DELETE", gw.url+"/api/vendor/v1/orders", key)
	a.wantError(t, 405, apierr.MethodNotAllowed)
	if a.header.Get("Allow") != "GET, POST" {
		t.Fatalf("Allow %q", a.header.Get("Allow"))
	}
	if b.calls.Load() != 0 {
		t.Fatalf("%d refused requests reached the backend", b.calls.Load())
	}
	for _, p := range []string{"/api/vendor/v1/me", "/api/vendor/v1/orders", "/api/vendor/v1/orders/0b9a7f0e-1111-4222-8333-444455556666",
		"/api/vendor/v1/orders/0b9a7f0e-1111-4222-8333-444455556666/reports/psp"} {
		if a := do(t, "GET", gw.url+p, key); a.status != 200 {
			t.Fatalf("GET %s: %d %s", p, a.status, a.body)
		}
	}
}

// authCase is one TestAuthenticationRules case's own gateway, backend and
// clock: no case sees the keys, cache entries or failed-key counts another
// left behind.
type authCase struct {
	b   *testBackend
	url string
	me  string

	mu  sync.Mutex
	now time.Time
}

func newAuthCase(t *testing.T) *authCase {
	t.Helper()
	c := &authCase{b: newTestBackend(t), now: time.Now()}
	gw := startGateway(t, c.b, func(o *Options) { o.Now = c.clock })
	c.url, c.me = gw.url, gw.url+"/api/vendor/v1/me"
	return c
}

func (c *authCase) clock() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *authCase) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// key issues a key to vendorID in status that expires in expiresIn.
func (c *authCase) key(vendorID, status string, expiresIn time.Duration) string {
	k, _ := c.b.addKey(vendorID, status, c.clock().Add(expiresIn))
	return k
}

// TestAuthenticationRules has one case per rule of the specification's
// Authentication section that the gateway decides. Each case sets up its
// own gateway and keys, so each passes or fails alone
// (-run 'TestAuthenticationRules/<case>').
func TestAuthenticationRules(t *testing.T) {
	t.Run("1 missing key", func(t *testing.T) {
		c := newAuthCase(t)
		a := do(t, "GET", c.me, "")
		a.wantError(t, 401, apierr.InvalidAPIKey)
		if a.header.Get("WWW-Authenticate") == "" {
			t.Fatal("no WWW-Authenticate")
		}
	})
	t.Run("2 malformed key", func(t *testing.T) {
		c := newAuthCase(t)
		good := c.key("vendor-ok", wire.VendorApproved, 90*24*time.Hour)
		for _, k := range []string{"short", "vgsandbx-" + good[9:], "vgsandbx_" + "has space in the secret ................", "VGSANDBX_" + good[9:]} {
			do(t, "GET", c.me, k).wantError(t, 401, apierr.InvalidAPIKey)
		}
		if n := c.b.lookups.Load(); n != 0 {
			t.Fatalf("a malformed key was looked up (%d lookups)", n)
		}
	})
	t.Run("4 key from another server", func(t *testing.T) {
		c := newAuthCase(t)
		good := c.key("vendor-ok", wire.VendorApproved, 90*24*time.Hour)
		do(t, "GET", c.me, "othersrv_"+good[9:]).wantError(t, 401, apierr.InvalidAPIKey)
		if n := c.b.lookups.Load(); n != 0 {
			t.Fatalf("a foreign key was looked up (%d lookups)", n)
		}
	})
	t.Run("2 key whose MAC does not verify", func(t *testing.T) {
		c := newAuthCase(t)
		good := c.key("vendor-ok", wire.VendorApproved, 90*24*time.Hour)
		unsigned := "vgsandbx_" + "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
		tampered := good[:9] + string("AB"[b2i(good[9] == 'A')]) + good[10:]
		for _, k := range []string{unsigned, tampered} {
			do(t, "GET", c.me, k).wantError(t, 401, apierr.InvalidAPIKey)
			do(t, "GET", c.me, k).wantError(t, 401, apierr.InvalidAPIKey)
		}
		if n := c.b.lookups.Load(); n != 0 {
			t.Fatalf("a key whose MAC does not verify was looked up (%d lookups)", n)
		}
	})
	t.Run("5 expired key", func(t *testing.T) {
		c := newAuthCase(t)
		do(t, "GET", c.me, c.key("vendor-ok", wire.VendorApproved, -time.Second)).wantError(t, 401, apierr.APIKeyExpired)
	})
	t.Run("5 expiry checked on a cached key", func(t *testing.T) {
		c := newAuthCase(t)
		k := c.key("vendor-ok", wire.VendorApproved, time.Second)
		if a := do(t, "GET", c.me, k); a.status != 200 {
			t.Fatalf("%d %s", a.status, a.body)
		}
		c.advance(2 * time.Second) // still cached (TTL 30s), now past expires_at
		do(t, "GET", c.me, k).wantError(t, 401, apierr.APIKeyExpired)
		if n := c.b.lookups.Load(); n != 1 {
			t.Fatalf("%d lookups; want 1 (the second answer came from the cache)", n)
		}
	})
	t.Run("6 unknown key, cached negatively", func(t *testing.T) {
		c := newAuthCase(t)
		unknown := signedKey(t) // signed, never issued
		do(t, "GET", c.me, unknown).wantError(t, 401, apierr.InvalidAPIKey)
		if n := c.b.lookups.Load(); n != 1 {
			t.Fatalf("%d lookups for the first call; want 1", n)
		}
		do(t, "GET", c.me, unknown).wantError(t, 401, apierr.InvalidAPIKey)
		if n := c.b.lookups.Load(); n != 1 {
			t.Fatal("a negative entry was not cached")
		}
	})
	t.Run("6 revoked key", func(t *testing.T) {
		c := newAuthCase(t)
		revoked := c.key("vendor-ok", wire.VendorApproved, time.Hour)
		ts := c.clock()
		c.b.update(revoked, func(r *wire.KeyResolution) { r.RevokedAt = &ts })
		do(t, "GET", c.me, revoked).wantError(t, 401, apierr.InvalidAPIKey)
	})
	t.Run("8 account not approved", func(t *testing.T) {
		c := newAuthCase(t)
		pending := c.key("vendor-pending", wire.VendorPending, time.Hour)
		do(t, "GET", c.me, pending).wantError(t, 403, apierr.AccountNotApproved)
		do(t, "GET", c.url+"/api/vendor/v1/orders", pending).wantError(t, 403, apierr.AccountNotApproved)
	})
	t.Run("9 suspended reads, refused orders", func(t *testing.T) {
		c := newAuthCase(t)
		suspended := c.key("vendor-susp", wire.VendorSuspended, time.Hour)
		if a := do(t, "GET", c.me, suspended); a.status != 200 {
			t.Fatalf("GET /me suspended: %d", a.status)
		}
		if a := do(t, "GET", c.url+"/api/vendor/v1/orders/0b9a7f0e-1111-4222-8333-444455556666", suspended); a.status != 200 {
			t.Fatalf("GET order suspended: %d", a.status)
		}
		do(t, "POST", c.url+"/api/vendor/v1/orders", suspended).wantError(t, 403, apierr.AccountSuspended)
	})
	t.Run("valid key", func(t *testing.T) {
		c := newAuthCase(t)
		if a := do(t, "GET", c.me, c.key("vendor-ok", wire.VendorApproved, 90*24*time.Hour)); a.status != 200 {
			t.Fatalf("%d %s", a.status, a.body)
		}
	})
}

func TestFailedKeyThrottle(t *testing.T) {
	b := newTestBackend(t)
	gw := startGateway(t, b, func(o *Options) {
		o.Config.FailedKeys.PerAddress = 20
		o.Config.FailedKeys.PerKey = 3
	})
	me := gw.url + "/api/vendor/v1/me"
	good, _ := b.addKey("vendor-ok", wire.VendorApproved, time.Now().Add(time.Hour))
	bad := "vgsandbx_" + "BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB"
	t.Run("per key", func(t *testing.T) {
		for i := 0; i < 3; i++ {
			do(t, "GET", me, bad).wantError(t, 401, apierr.InvalidAPIKey)
		}
		a := do(t, "GET", me, bad)
		a.wantError(t, 429, apierr.RateLimited)
		if ra := a.header.Get("Retry-After"); ra == "" || ra == "0" {
			t.Fatalf("Retry-After %q", ra)
		}
	})
	t.Run("per address", func(t *testing.T) {
		for i := 0; i < 30; i++ { // distinct malformed keys: only the address counts them all
			a := do(t, "GET", me, "bad-"+string(rune('a'+i)))
			if a.status == 429 {
				a.wantError(t, 429, apierr.RateLimited)
				if i < 16 { // 4 failures above count too
					t.Fatalf("throttled after %d", i)
				}
				return
			}
		}
		t.Fatal("never throttled")
	})
	t.Run("valid key not refused for its address", func(t *testing.T) {
		if a := do(t, "GET", me, good); a.status != 200 {
			t.Fatalf("%d %s", a.status, a.body)
		}
	})
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// randomKey is a well-formed key with the right prefix and a random secret
// of the right shape: what an attacker guessing keys sends.
func randomKey(t testing.TB) string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "vgsandbx_" + base64.RawURLEncoding.EncodeToString(b[:])
}

// statusFrom sends GET url with key from the local address from.
func statusFrom(t testing.TB, c *fasthttp.Client, url, key string) int {
	t.Helper()
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(url)
	req.Header.Set(wire.HeaderAPIKey, key)
	if err := c.Do(req, resp); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode()
}

// clientFrom is a client whose connections leave from the address from.
func clientFrom(from string) *fasthttp.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	return &fasthttp.Client{Dial: func(addr string) (net.Conn, error) { return d.Dial("tcp", addr) }}
}

// TestRandomKeyFloodNeverReachesBackend: 1,000 random well-formed keys,
// from one address and spread over 100, make no backend key lookup. From
// one address they are answered 401 up to the failed-key threshold, 429
// past it; spread out, each address stays under it and every answer is 401.
func TestRandomKeyFloodNeverReachesBackend(t *testing.T) {
	b := newTestBackend(t)
	gw := startGateway(t, b, nil) // 100 failures per address, 10 per key
	me := gw.url + "/api/vendor/v1/me"

	one := clientFrom("127.0.0.1")
	counts := map[int]int{}
	for i := 0; i < 1000; i++ {
		st := statusFrom(t, one, me, randomKey(t))
		counts[st]++
		want := 401
		if i >= 100 {
			want = 429 // past the threshold
		}
		if st != want {
			t.Fatalf("key %d from one address: %d, want %d", i, st, want)
		}
	}
	if n := b.lookups.Load(); n != 0 {
		t.Fatalf("one address: %d backend key lookups for 1,000 random keys (answers %v), want 0", n, counts)
	}

	for i := 0; i < 1000; i++ {
		from := fmt.Sprintf("127.0.1.%d", 1+i%100)
		if st := statusFrom(t, clientFrom(from), me, randomKey(t)); st != 401 {
			t.Fatalf("key %d from %s: %d, want 401", i, from, st)
		}
	}
	if n := b.lookups.Load(); n != 0 {
		t.Fatalf("100 addresses: %d backend key lookups for 1,000 random keys, want 0", n)
	}
	a := do(t, "GET", gw.admin+"/metrics", "")
	if want := `vendorgate_gateway_auth_failures_total{reason="bad_signature"} 2000`; !strings.Contains(string(a.body), want) {
		t.Fatalf("metrics lack %s", want)
	}
	if s := gw.g.auth.Cache().Stats(); s.Entries+s.NegativeEntries != 0 {
		t.Fatalf("random keys were cached: %+v", s)
	}
}
