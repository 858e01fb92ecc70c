package limit

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// kick tells a test that something it may be waiting for happened (a
// hook of the limiter's, a beat of its lease loop, a command of its
// client answered); a kick not yet taken holds the next ones.
type kick chan struct{}

func newKick() kick { return make(kick, 1) }

func (k kick) fire() {
	select {
	case k <- struct{}{}:
	default:
	}
}

// within waits until cond holds, for up to bound, and reports whether it
// held. cond is checked at the start and again at each event of ev: the
// events that may change what it reads (the limiter's hooks, its lease
// loop's beats, its client's commands answered), so that no state is
// polled on a pace of the test's own.
func within(bound time.Duration, ev <-chan struct{}, cond func() bool) bool {
	timeout := time.NewTimer(bound)
	defer timeout.Stop()
	for !cond() {
		select {
		case <-ev:
		case <-timeout.C:
			return cond()
		}
	}
	return true
}

// nextBeat waits for the end of the next beat of the lease loop that
// ends after it is called: what a beat under way queued (the refunds of a
// reload) has been sent by then.
func nextBeat(t *testing.T, c testClock) {
	t.Helper()
	n := c.beats.Load()
	if !within(5*time.Second, c.kick, func() bool { return c.beats.Load() > n }) {
		t.Fatal("no beat of the lease loop ended within 5s")
	}
}

// silence stops Redis' answers (pause: a server's or a node's Pause)
// and moves r's clock on by d: Redis silent for d on the limiter's clock,
// which is what a lease is honoured by (when an answer was last read from
// Redis, and with a Cluster when every master last answered a ping, both
// on that clock), without waiting d. It does so between two beats of the
// lease loop, so that no heartbeat's answer is on its way to be read
// after the move. (A caller's wait on Redis and a heartbeat's ping are
// judged by timers and socket deadlines, not by this move: the on-time
// probe sees it as a late wake.)
func silence(r *Redis, pause func(), d time.Duration) {
	r.loopMu.Lock()
	defer r.loopMu.Unlock()
	pause()
	r.clock.(testClock).ahead.Add(int64(d))
}

// answered is a client's hook that kicks k each time a command or a
// pipeline of the client has returned.
type answered struct{ k kick }

func (h answered) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h answered) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.k.fire()
		return err
	}
}

func (h answered) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.k.fire()
		return err
	}
}
