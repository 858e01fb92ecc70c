package backend

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"vendorgate/backend/store"
	"vendorgate/backend/store/sqlite"
)

// interleaved is the real SQLite store with gates that force the worst
// order of two retries taking over one abandoned record, as a busy backend
// can run them: both find the record abandoned; the first goes on up to
// linking its order and waits there; the second then does its takeover;
// the test lets the first finish once the second has its answer. Each gate
// gives up after 2s, so a code path that never reaches it is not held.
type interleaved struct {
	store.Store
	mu sync.Mutex
	g  *gates
}

type gates struct {
	seen, created int
	bothSeen      chan struct{} // both retries found the abandoned record
	atCreate      chan struct{} // the first is about to link its order
	release       chan struct{} // the test lets it link
}

func (s *interleaved) arm() *gates {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.g = &gates{bothSeen: make(chan struct{}), atCreate: make(chan struct{}), release: make(chan struct{})}
	return s.g
}

func wait(ch chan struct{}) {
	select {
	case <-ch:
	case <-time.After(2 * time.Second):
	}
}

func (s *interleaved) ReserveIdempotency(ctx context.Context, rec store.Idempotency) (*store.Idempotency, error) {
	e, err := s.Store.ReserveIdempotency(ctx, rec)
	if err != nil || e == nil || e.RequestHash != "crashed" {
		return e, err
	}
	s.mu.Lock()
	g := s.g
	g.seen++
	n := g.seen
	if n == 2 {
		close(g.bothSeen)
	}
	s.mu.Unlock()
	if n == 1 {
		wait(g.bothSeen)
	} else {
		wait(g.atCreate)
	}
	return e, err
}

func (s *interleaved) CreateOrder(ctx context.Context, o *store.Order, idemKey string) error {
	s.mu.Lock()
	g := s.g
	g.created++
	first := g.created == 1
	s.mu.Unlock()
	if first {
		close(g.atCreate)
		wait(g.release)
	}
	return s.Store.CreateOrder(ctx, o, idemKey)
}

// TestOrphanedKeyTakenOverByTwoRetriesAtOnce: a placement crashed after
// reserving its Idempotency-Key; two retries with different bodies both
// find the record abandoned and take it over at once (in the worst order,
// see interleaved). Exactly one order is
// placed, the other retry is told in_progress (or idempotency_conflict),
// never a 500, and the key stays linked to the winner's body.
func TestOrphanedKeyTakenOverByTwoRetriesAtOnce(t *testing.T) {
	sq, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "takeover.db"))
	if err != nil {
		t.Fatal(err)
	}
	st := &interleaved{Store: sq}
	h := start(t, func(o *Options) { o.Store = st })
	v := h.newVendor("sandbox", allServices...)
	bodies := []string{orderBody("D1111111", "mvr"), orderBody("D2222222", "psp")}
	ctx := context.Background()
	for round := range 20 {
		key := fmt.Sprintf("orphan-%d", round)
		if rec, err := sq.ReserveIdempotency(ctx, store.Idempotency{VendorID: v, Key: key, RequestHash: "crashed", CreatedAt: h.clock.Now()}); err != nil || rec != nil {
			t.Fatal(rec, err)
		}
		h.clock.Advance(time.Minute)
		g := st.arm()
		type answer struct {
			i int
			r resp
		}
		done := make(chan answer, 2)
		for i := range 2 {
			go func() { done <- answer{i, h.place(v, key, bodies[i])} }()
		}
		answers := make([]resp, 2)
		a := <-done
		answers[a.i] = a.r
		close(g.release)
		a = <-done
		answers[a.i] = a.r
		winner := -1
		for i, r := range answers {
			switch code := r.code(); {
			case r.status == 202 && winner < 0:
				winner = i
			case r.status == 409 && (code == "in_progress" || code == "idempotency_conflict"):
			default:
				t.Fatalf("round %d: retry %d answered %d %s (the other: %d %s)", round, i, r.status, r.body, answers[1-i].status, answers[1-i].body)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: neither retry placed its order: %d %s / %d %s", round, answers[0].status, answers[0].body, answers[1].status, answers[1].body)
		}
		o := answers[winner].order(t)
		if len(o.Services) != 1 || o.Services[0].Service != []string{"mvr", "psp"}[winner] {
			t.Fatalf("round %d: the winner's order has services %+v", round, o.Services)
		}
		// The key answers the winner's body with its order and the
		// other body with a conflict naming it.
		if r := h.place(v, key, bodies[winner]); r.status != 202 || r.order(t).OrderID != o.OrderID {
			t.Fatalf("round %d: the winner's body again: %d %s, want its order %s", round, r.status, r.body, o.OrderID)
		}
		r := h.place(v, key, bodies[1-winner])
		if code, _, id := r.envelope(t); r.status != 409 || code != "idempotency_conflict" || id != o.OrderID {
			t.Fatalf("round %d: the loser's body again: %d %s, want idempotency_conflict naming %s", round, r.status, r.body, o.OrderID)
		}
	}
}
