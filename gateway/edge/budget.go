package edge

import (
	"errors"
	"sync"
	"time"
)

// ErrOverBudget fails a handshake that found no room in the budget within
// its wait: the connection is closed, counted apart from the failures.
var ErrOverBudget = errors.New("tls handshake budget exhausted")

// Budget bounds the server's share of handshake work across all peers:
// at most InProgress handshakes at once, counted from the ClientHello's
// arrival (a client that sends nothing holds no place) to the
// handshake's end, and at most PerSecond begun a second, with a burst of
// InProgress. A handshake over either waits, at most Wait from its
// start (the connection's first read, when the server has just set its
// read deadline), then fails: a place given later would go to a
// handshake with no time left to finish, and its signature would be
// work for a connection about to close. Requests on established
// connections never wait for it.
type Budget struct {
	slots    chan struct{}
	interval time.Duration // between two handshakes at PerSecond
	burst    time.Duration // interval × InProgress
	wait     time.Duration

	mu  sync.Mutex
	tat time.Time // the rate's theoretical arrival time
}

// NewBudget refuses a zero or negative setting.
func NewBudget(inProgress, perSecond int, wait time.Duration) (*Budget, error) {
	if inProgress <= 0 || perSecond <= 0 || wait <= 0 {
		return nil, errors.New("tls handshake budget: in progress, per second and wait must be positive")
	}
	iv := time.Second / time.Duration(perSecond)
	return &Budget{slots: make(chan struct{}, inProgress), interval: iv, burst: iv * time.Duration(inProgress-1), wait: wait}, nil
}

// InProgress is how many handshakes hold a place now.
func (b *Budget) InProgress() int { return len(b.slots) }

// acquire takes a place for one handshake, waiting at most until until;
// release gives it back. The rate is a GCRA: tat is when the next
// handshake would be on time at PerSecond, and one may run early by the
// burst.
func (b *Budget) acquire(until time.Time) error {
	now := time.Now()
	wait := until.Sub(now)
	b.mu.Lock()
	tat := b.tat
	if tat.Before(now) {
		tat = now
	}
	delay := tat.Sub(now) - b.burst
	if delay > wait {
		b.mu.Unlock()
		return ErrOverBudget
	}
	b.tat = tat.Add(b.interval)
	b.mu.Unlock()
	var timer *time.Timer
	if delay > 0 {
		timer = time.NewTimer(delay)
		<-timer.C
	}
	select {
	case b.slots <- struct{}{}:
		return nil
	default:
	}
	left := wait - max(delay, 0)
	if left <= 0 {
		return ErrOverBudget
	}
	if timer == nil {
		timer = time.NewTimer(left)
	} else {
		timer.Reset(left)
	}
	defer timer.Stop()
	select {
	case b.slots <- struct{}{}:
		return nil
	case <-timer.C:
		return ErrOverBudget
	}
}

func (b *Budget) release() { <-b.slots }
