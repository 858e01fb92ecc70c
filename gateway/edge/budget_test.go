package edge

import (
	"errors"
	"testing"
	"time"
)

// The rate: a burst of InProgress handshakes begin at once, the next is
// due a PerSecond interval later and is refused when that is past its
// wait; a refused one takes nothing. In progress: a place is free again
// only when released.
func TestBudget(t *testing.T) {
	if _, err := NewBudget(0, 10, time.Second); err == nil {
		t.Fatal("a zero in-progress bound was taken")
	}
	b, err := NewBudget(4, 10, time.Millisecond) // the next after the burst is due in 100ms
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if err := b.acquire(time.Now().Add(b.wait)); err != nil {
			t.Fatalf("handshake %d of the burst: %v", i+1, err)
		}
		b.release()
	}
	for range 3 {
		if err := b.acquire(time.Now().Add(b.wait)); !errors.Is(err, ErrOverBudget) {
			t.Fatalf("past the burst at 10 a second, with 1ms to wait: %v, want ErrOverBudget", err)
		}
	}

	b, err = NewBudget(2, 1000000, time.Millisecond) // the rate never binds
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := b.acquire(time.Now().Add(b.wait)); err != nil {
			t.Fatalf("place %d: %v", i+1, err)
		}
	}
	if b.InProgress() != 2 {
		t.Fatalf("%d in progress, want 2", b.InProgress())
	}
	if err := b.acquire(time.Now().Add(b.wait)); !errors.Is(err, ErrOverBudget) {
		t.Fatalf("a third place with two held: %v", err)
	}
	b.release()
	if err := b.acquire(time.Now().Add(b.wait)); err != nil || b.InProgress() != 2 {
		t.Fatalf("a place released was not taken again: %v", err)
	}
}
