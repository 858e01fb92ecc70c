package edgetls

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
// InProgress. A handshake over either waits, at most Wait, then fails.
// Requests on established connections never wait for it.
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

// acquire takes a place for one handshake, waiting at most b.wait;
// release gives it back. The rate is a GCRA: tat is when the next
// handshake would be on time at PerSecond, and one may run early by the
// burst.
func (b *Budget) acquire() error {
	now := time.Now()
	b.mu.Lock()
	tat := b.tat
	if tat.Before(now) {
		tat = now
	}
	delay := tat.Sub(now) - b.burst
	if delay > b.wait {
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
	left := b.wait - max(delay, 0)
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
