package usage

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// testGuardTTL is the tests' Redis stores' memory of applied flushes.
const testGuardTTL = 2 * time.Hour

// testOptions are valid options for a Recorder of st on the clock now
// (time.Now when nil) whose flusher never fires on its own (a long
// interval): the test flushes.
func testOptions(st Store, now func() time.Time) Options {
	return Options{Stores: []Store{st}, Interval: time.Hour, MaxAge: time.Hour, MaxBytes: 32 << 20, Now: now, Names: func() []string { return testNames }}
}

// TestNewRefusesZeros: the recorder and the Redis store fill in no default
// of their own: each duration and count they need, left zero, is refused
// with an error that names it.
func TestNewRefusesZeros(t *testing.T) {
	good := testOptions(NewLocal(nil), nil)
	r, err := New(good)
	if err != nil {
		t.Fatalf("valid options refused: %v", err)
	}
	r.Close()
	for name, zero := range map[string]func(o *Options){
		"stores":    func(o *Options) { o.Stores = nil },
		"interval":  func(o *Options) { o.Interval = 0 },
		"max age":   func(o *Options) { o.MaxAge = 0 },
		"max bytes": func(o *Options) { o.MaxBytes = 0 },
	} {
		o := good
		zero(&o)
		r, err := New(o)
		switch {
		case err == nil:
			r.Close()
			t.Errorf("recorder, %s zero: accepted", name)
		case !strings.Contains(err.Error(), name):
			t.Errorf("recorder, %s zero: %q does not name it", name, err)
		}
	}

	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = c.Close() })
	goodRedis := RedisOptions{Client: c, Timeout: time.Second, GuardTTL: testGuardTTL}
	if _, err := NewRedis(goodRedis); err != nil {
		t.Fatalf("valid Redis options refused: %v", err)
	}
	for name, zero := range map[string]func(o *RedisOptions){
		"timeout":   func(o *RedisOptions) { o.Timeout = 0 },
		"guard ttl": func(o *RedisOptions) { o.GuardTTL = 0 },
	} {
		o := goodRedis
		zero(&o)
		_, err := NewRedis(o)
		switch {
		case err == nil:
			t.Errorf("redis store, %s zero: accepted", name)
		case !strings.Contains(err.Error(), name):
			t.Errorf("redis store, %s zero: %q does not name it", name, err)
		}
	}
}
