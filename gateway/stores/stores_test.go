package stores

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"vendorgate/config"
	"vendorgate/gateway/limit"
)

// TestCheck: one URL a server, several a Cluster, a master name a
// Sentinel set; a URL go-redis refuses is named by its place and host,
// never its password.
func TestCheck(t *testing.T) {
	uo, err := universalOptions(config.Redis{URL: []string{"redis://:pw@10.0.0.1:6380/2"}})
	if err != nil || uo.IsClusterMode || uo.Addrs[0] != "10.0.0.1:6380" || uo.Password != "pw" || uo.DB != 2 {
		t.Fatalf("one URL: %+v, %v", uo, err)
	}
	if uo, _ = universalOptions(config.Redis{URL: []string{"redis://a:1", "redis://b:2"}}); !uo.IsClusterMode {
		t.Fatal("two URLs are not a Cluster")
	}
	if uo, _ = universalOptions(config.Redis{URL: []string{"redis://a:1", "redis://b:2"}, MasterName: "m"}); uo.IsClusterMode || uo.MasterName != "m" {
		t.Fatal("a master name is not a Sentinel set")
	}
	err = Check(config.Redis{URL: []string{"redis://a:1", "redis://:secret@h:1/x"}})
	if err == nil || !strings.Contains(err.Error(), "redis url 2 (h:1)") || strings.Contains(err.Error(), "secret") {
		t.Fatalf("a bad URL: %v", err)
	}
}

// TestInProcess: without Redis URLs the stores are the in-process twins,
// with no client, and Close has nothing to close but the slots.
func TestInProcess(t *testing.T) {
	c := config.DefaultGateway()
	c.Redis.URL = nil
	s, err := New(Options{Config: c, Now: time.Now, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Limiter.(*limit.Local); !ok || s.Redis != nil || s.Windows == nil || s.Slots == nil || s.Throttle == nil || s.Usage == nil {
		t.Fatalf("in process: %+v", s)
	}
	if s.Clients != (Clients{}) {
		t.Fatalf("in process with clients: %+v", s.Clients)
	}
	s.Close()
}
