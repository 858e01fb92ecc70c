package throttle

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"vendorgate/config"
)

// testLocal is an in-process throttle on the clock now, bounded as the
// settings' defaults bound it (config holds them).
func testLocal(t testing.TB, now func() time.Time) *Throttle {
	t.Helper()
	tr, err := NewLocal(LocalOptions{Now: now, MaxTracked: config.DefaultGateway().FailedKeys.MaxTracked})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// testRedisOptions are valid options for a throttle counting through c,
// sized as the gateway sizes it from the settings' defaults: the limiter's
// timeout, failed_keys' pool and bound, redis.breaker_open_for's hold.
func testRedisOptions(c redis.UniversalClient) RedisOptions {
	d := config.DefaultGateway()
	return RedisOptions{Client: c, Timeout: d.Redis.Timeout, Conns: d.FailedKeys.RedisPoolSize, Hold: d.Redis.BreakerOpenFor,
		MaxTracked: d.FailedKeys.MaxTracked}
}

// testRedis is a throttle of o (see testRedisOptions).
func testRedis(t testing.TB, o RedisOptions) *Throttle {
	t.Helper()
	tr, err := NewRedis(o)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// TestNewRefusesZeros: the throttles fill in no default of their own:
// each duration and count they need, left zero, is refused with an error
// that names it.
func TestNewRefusesZeros(t *testing.T) {
	if _, err := NewLocal(LocalOptions{}); err == nil {
		t.Error("local, max tracked zero: accepted")
	} else if !strings.Contains(err.Error(), "max tracked") {
		t.Errorf("local, max tracked zero: %q does not name it", err)
	}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = c.Close() })
	good := testRedisOptions(c)
	if _, err := NewRedis(good); err != nil {
		t.Fatalf("valid Redis options refused: %v", err)
	}
	for name, zero := range map[string]func(o *RedisOptions){
		"client":      func(o *RedisOptions) { o.Client = nil },
		"timeout":     func(o *RedisOptions) { o.Timeout = 0 },
		"conns":       func(o *RedisOptions) { o.Conns = 0 },
		"hold":        func(o *RedisOptions) { o.Hold = 0 },
		"max tracked": func(o *RedisOptions) { o.MaxTracked = 0 },
	} {
		o := good
		zero(&o)
		_, err := NewRedis(o)
		switch {
		case err == nil:
			t.Errorf("redis, %s zero: accepted", name)
		case !strings.Contains(err.Error(), name):
			t.Errorf("redis, %s zero: %q does not name it", name, err)
		}
	}
}
