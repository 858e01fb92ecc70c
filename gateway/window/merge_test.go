package window

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"vendorgate/gateway/policy"
	"vendorgate/shared/testredis"
)

// mergedCharges has 16 requesters charge at once, each 20 times, its own
// vendor's sliding window of 10 a minute and daily quota of 15 (Redis'
// clock), through one limiter: the transport merges concurrent charges
// into one script run, and each requester must still get its own answers:
// its first 10 admitted with the window's count rising by one, the next
// 10 refused with nothing charged, the quota counting the admitted only.
// It returns how many charges were made.
func mergedCharges(t *testing.T, l *Redis, vendor func(int) string) int {
	t.Helper()
	const requesters, each = 16, 20
	var wg sync.WaitGroup
	errs := make(chan error, requesters)
	for r := 0; r < requesters; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := vendor(r)
			cs := checks(policy.Check{Key: "vg:{v:" + v + "}:slide", Rate: sliding("slide", 10, time.Minute)},
				policy.Check{Key: "vg:{v:" + v + "}:day", Rate: quota("day", 15, policy.Calendar{Days: 1})})
			for i := 0; i < each; i++ {
				d, err := l.Charge(cs)
				if err != nil {
					errs <- fmt.Errorf("requester %d, charge %d: %w", r, i, err)
					return
				}
				admit := i < 10
				slide, day := d.Results[0], d.Results[1]
				if d.Allowed != admit || slide.Used != min(i+1, 10) || day.Used != min(i+1, 10) || slide.charged != admit || day.charged != admit {
					errs <- fmt.Errorf("requester %d, charge %d: allowed %v, window %d used (charged %v), quota %d used (charged %v); want allowed %v, %d used in both",
						r, i, d.Allowed, slide.Used, slide.charged, day.Used, day.charged, admit, min(i+1, 10))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	return requesters * each
}

// Concurrent charges share script runs and keep their own answers.
func TestChargesMergedKeepTheirOwnAnswers(t *testing.T) {
	rs := testredis.Start(t)
	l := newRedisLimiter(t, rs, nil)
	before := rs.Info(t, "commandstats").Scripts()
	n := mergedCharges(t, l, func(r int) string { return fmt.Sprintf("m%d", r) })
	runs := rs.Info(t, "commandstats").Scripts() - before
	if runs >= int64(n) {
		t.Fatalf("%d script runs for %d concurrent charges: none merged", runs, n)
	}
	t.Logf("%d charges in %d script runs", n, runs)
}

// On a Redis Cluster, the charges merged into one run are those of one
// hash slot: 16 vendors' charges, their buckets on every master, each get
// their own answers.
func TestChargesMergedOnCluster(t *testing.T) {
	cl := testredis.StartCluster(t)
	cl.WaitOK(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), MaxRetries: -1, ContextTimeoutEnabled: true,
		ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	t.Cleanup(func() { c.Close() })
	l, err := NewRedis(RedisOptions{Client: c, Conn: transport(t, c, 2*time.Second), Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	nodes := map[*testredis.Server]bool{}
	for r := 0; r < 16; r++ {
		nodes[cl.NodeFor(t, fmt.Sprintf("vg:{v:c%d}:slide", r))] = true
	}
	if len(nodes) < 2 {
		t.Fatalf("the vendors' buckets are on %d master, want several", len(nodes))
	}
	mergedCharges(t, l, func(r int) string { return fmt.Sprintf("c%d", r) })
}
