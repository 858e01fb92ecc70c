package auth

import (
	"cmp"
	"strings"
	"testing"
	"time"

	"vendorgate/config"
	"vendorgate/shared/apikey"
)

// testMaxRefreshes bounds the tests' authenticators' background refreshes.
const testMaxRefreshes = 16

// testCache is a cache of o, whose bounds left zero are the settings'
// defaults as the gateway applies them (config's KeyCache.InForce: a
// NegativeSize of 0 is a tenth of Size).
func testCache(t testing.TB, o CacheOptions) *Cache {
	t.Helper()
	c, err := NewCache(withCacheDefaults(o))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func withCacheDefaults(o CacheOptions) CacheOptions {
	d := config.DefaultGateway().KeyCache
	k := config.KeyCache{Size: cmp.Or(o.Size, d.Size), TTL: cmp.Or(o.TTL, d.TTL), NegativeTTL: cmp.Or(o.NegativeTTL, d.NegativeTTL),
		NegativeSize: o.NegativeSize, PushedTTL: o.PushedTTL}.InForce()
	o.Size, o.NegativeSize, o.TTL, o.PushedTTL, o.NegativeTTL = k.Size, k.NegativeSize, k.TTL, k.PushedTTL, k.NegativeTTL
	return o
}

// TestNewCacheRefusesZeros: the cache and the authenticator fill in no
// default of their own (config holds them): each bound they need, left
// zero, is refused with an error that names it, and so is a pushed TTL
// shorter than the TTL.
func TestNewCacheRefusesZeros(t *testing.T) {
	good := withCacheDefaults(CacheOptions{})
	if _, err := NewCache(good); err != nil {
		t.Fatalf("valid cache options refused: %v", err)
	}
	for name, zero := range map[string]func(o *CacheOptions){
		"size":          func(o *CacheOptions) { o.Size = 0 },
		"negative size": func(o *CacheOptions) { o.NegativeSize = 0 },
		"ttl":           func(o *CacheOptions) { o.TTL = 0 },
		"pushed ttl":    func(o *CacheOptions) { o.PushedTTL = 0 },
		"negative ttl":  func(o *CacheOptions) { o.NegativeTTL = 0 },
		"pushed ttl below the ttl": func(o *CacheOptions) {
			o.PushedTTL = o.TTL - time.Second
		},
	} {
		o := good
		zero(&o)
		_, err := NewCache(o)
		switch {
		case err == nil:
			t.Errorf("cache, %s: accepted", name)
		case !strings.Contains(err.Error(), strings.TrimSuffix(name, " below the ttl")):
			t.Errorf("cache, %s: %q does not name it", name, err)
		}
	}
	o := Options{Prefixes: apikey.DefaultPrefixes(), Signer: testSigner(t), Cache: testCache(t, CacheOptions{}), Lookup: &table{},
		MaxRefreshes: testMaxRefreshes}
	if _, err := New(o); err != nil {
		t.Fatalf("valid options refused: %v", err)
	}
	o.MaxRefreshes = 0
	if _, err := New(o); err == nil {
		t.Error("max refreshes 0: accepted")
	} else if !strings.Contains(err.Error(), "max refreshes") {
		t.Errorf("max refreshes 0: %q does not name it", err)
	}
}
