package proxy

import (
	"bytes"
	"errors"
	"os"
	"testing"
	"time"
)

// deadlines records the write deadlines a paced stream sets.
type deadlines []time.Time

func (d *deadlines) SetWriteDeadline(t time.Time) error {
	*d = append(*d, t)
	return nil
}

type counted struct{ n int }

func (c *counted) Release() { c.n++ }

// The floor's arithmetic on a clock the test moves: nothing is due in the
// grace; then each window's quota is read and written by the window's
// end; a window that ends short cuts the stream; closing gives the slot
// back once and counts the cut.
func TestStreamPacing(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := start
	now := func() time.Time { return clock }
	cuts := 0
	p := &Proxy{onTooSlow: func() { cuts++ }}
	s := p.getBody()
	var dl deadlines
	hold := &counted{}
	s.body, s.hold = bytes.NewReader(make([]byte, 1<<20)), hold
	// 1000 B/s over 2 s windows after a 1 s grace; idle 10 s.
	s.pace(&dl, MinRate{Bytes: 1000, Window: 2 * time.Second, Grace: time.Second}, 10*time.Second, now)
	buf := make([]byte, 4096)

	// In the grace: a whole read, its write due by the first window's end.
	if n, err := s.Read(buf); n != 4096 || err != nil {
		t.Fatalf("in the grace: %d, %v", n, err)
	}
	if want := start.Add(3 * time.Second); !dl[len(dl)-1].Equal(want) {
		t.Fatalf("deadline in the grace %s; want the first window's end %s", dl[len(dl)-1].Sub(start), want.Sub(start))
	}
	// The first window (1 s to 3 s) needs 2000 bytes: a read is held to
	// them, and due by the window's end.
	clock = start.Add(1500 * time.Millisecond)
	if n, err := s.Read(buf); n != 2000 || err != nil {
		t.Fatalf("in the first window: %d, %v; want the 2000 bytes due", n, err)
	}
	if want := start.Add(3 * time.Second); !dl[len(dl)-1].Equal(want) {
		t.Fatalf("deadline %s; want the window's end %s", dl[len(dl)-1].Sub(start), want.Sub(start))
	}
	// Met: the next read is whole, its write due by the next window's end.
	if n, err := s.Read(buf); n != 4096 || err != nil {
		t.Fatalf("after the quota: %d, %v", n, err)
	}
	if want := start.Add(5 * time.Second); !dl[len(dl)-1].Equal(want) {
		t.Fatalf("deadline %s; want the next window's end %s", dl[len(dl)-1].Sub(start), want.Sub(start))
	}
	// The second window (3 s to 5 s) moves 500 bytes only.
	clock = start.Add(3500 * time.Millisecond)
	if n, err := s.Read(buf[:500]); n != 500 || err != nil {
		t.Fatalf("in the second window: %d, %v", n, err)
	}
	clock = start.Add(5 * time.Second)
	if n, err := s.Read(buf); n != 0 || !errors.Is(err, ErrTooSlow) {
		t.Fatalf("after a window short of its quota: %d, %v; want ErrTooSlow", n, err)
	}
	_ = s.CloseWithError(ErrTooSlow)
	_ = s.CloseWithError(ErrTooSlow) // fasthttp never does; a second close is ignored
	if hold.n != 1 || cuts != 1 {
		t.Fatalf("released %d times, %d cuts counted; want 1 and 1", hold.n, cuts)
	}
}

// The idle timeout bounds a write whose rate deadline is further off; a
// write that times out under the rate's deadline counts as a cut.
func TestStreamIdleBoundAndRateTimeout(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := start
	cuts := 0
	p := &Proxy{onTooSlow: func() { cuts++ }}
	for _, tc := range []struct {
		idle     time.Duration
		want     time.Duration
		rateCuts int
	}{
		{idle: time.Second, want: time.Second, rateCuts: 0},      // idle is nearer: a timeout is idle's
		{idle: time.Minute, want: 30 * time.Second, rateCuts: 1}, // the window's end is nearer: the rate's
	} {
		cuts = 0
		s := p.getBody()
		var dl deadlines
		s.body = bytes.NewReader(make([]byte, 1<<20))
		s.pace(&dl, MinRate{Bytes: 1, Window: 20 * time.Second, Grace: 10 * time.Second}, tc.idle, func() time.Time { return clock })
		if _, err := s.Read(make([]byte, 100)); err != nil {
			t.Fatal(err)
		}
		if got := dl[len(dl)-1].Sub(start); got != tc.want {
			t.Fatalf("idle %s: deadline %s; want %s", tc.idle, got, tc.want)
		}
		_ = s.CloseWithError(os.ErrDeadlineExceeded)
		if cuts != tc.rateCuts {
			t.Fatalf("idle %s: %d cuts counted; want %d", tc.idle, cuts, tc.rateCuts)
		}
	}
}
