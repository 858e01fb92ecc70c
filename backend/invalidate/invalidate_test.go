package invalidate

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"vendorgate/shared/testredis"
	"vendorgate/shared/wire"
)

func TestPublishReachesSubscribers(t *testing.T) {
	rs := testredis.Start(t)
	p, err := New(Options{URLs: []string{rs.URL()}, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	rc := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sub := rc.Subscribe(ctx, wire.InvalidationChannel)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Publish(ctx, wire.Invalidation{KeyHash: "abc"}); err != nil {
		t.Fatal(err)
	}
	m, err := sub.ReceiveMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.Payload != `{"key_hash":"abc"}` {
		t.Fatalf("payload = %s", m.Payload)
	}
	var inv wire.Invalidation
	if err := json.Unmarshal([]byte(m.Payload), &inv); err != nil || inv.KeyHash != "abc" {
		t.Fatal(inv, err)
	}
}

func TestPublishFailsFastWhenRedisIsGone(t *testing.T) {
	rs := testredis.Start(t)
	p, err := New(Options{URLs: []string{rs.URL()}, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	rs.Stop()
	start := time.Now()
	if err := p.Publish(context.Background(), wire.Invalidation{VendorID: "v"}); err == nil {
		t.Fatal("publish to a stopped Redis succeeded")
	}
	if time.Since(start) > 3*time.Second {
		t.Fatalf("publish took %s", time.Since(start))
	}
}

func TestOptionsFromURLs(t *testing.T) {
	uo, err := universalOptions([]string{"redis://:pw@10.0.0.1:6380/2"}, "")
	if err != nil || uo.Password != "pw" || uo.DB != 2 || len(uo.Addrs) != 1 || uo.Addrs[0] != "10.0.0.1:6380" || uo.IsClusterMode {
		t.Fatalf("single = %+v, %v", uo, err)
	}
	uo, _ = universalOptions([]string{"redis://a:1", "redis://b:2"}, "")
	if !uo.IsClusterMode || len(uo.Addrs) != 2 {
		t.Fatalf("cluster = %+v", uo)
	}
	uo, _ = universalOptions([]string{"redis://a:26379", "redis://b:26379"}, "mymaster")
	if uo.IsClusterMode || uo.MasterName != "mymaster" {
		t.Fatalf("sentinel = %+v", uo)
	}
	if _, err := New(Options{Timeout: time.Second}); err == nil {
		t.Fatal("New without URLs succeeded")
	}
}

// TestNewRefusesZeros: the publisher fills in no default of its own: its
// publish timeout, left zero (or negative), is refused with an error that
// names it; the backend passes its named constant.
func TestNewRefusesZeros(t *testing.T) {
	urls := []string{"redis://127.0.0.1:1"}
	p, err := New(Options{URLs: urls, Timeout: time.Second})
	if err != nil {
		t.Fatalf("valid options refused: %v", err)
	}
	p.Close()
	for _, d := range []time.Duration{0, -time.Second} {
		p, err := New(Options{URLs: urls, Timeout: d})
		switch {
		case err == nil:
			p.Close()
			t.Errorf("timeout %s: accepted", d)
		case !strings.Contains(err.Error(), "timeout"):
			t.Errorf("timeout %s: %q does not name it", d, err)
		}
	}
}
