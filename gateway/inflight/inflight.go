// Package inflight counts each vendor's requests in flight at this gateway
// and refuses one past the vendor's caps: a rate limit bounds how often a
// vendor asks, not how long it holds what it got, and one vendor's slow
// report downloads could otherwise hold every backend connection.
//
// A request takes a Slot when it is admitted and gives it back when its
// answer is done: a streamed report when its last byte is written or the
// stream is cut. The counts are per gateway (never Redis): a slot lives as
// long as a connection, which no other replica sees.
package inflight

import (
	"sync"
	"sync/atomic"
)

// Caps are one vendor's caps: requests in all, report downloads among them.
type Caps struct {
	Requests  int32
	Downloads int32
}

// Refusal says which cap refused a request.
type Refusal int

const (
	// Admitted: no cap refused.
	Admitted Refusal = iota
	// OverRequests: the vendor had Caps.Requests requests in flight.
	OverRequests
	// OverDownloads: the vendor had Caps.Downloads downloads in flight.
	OverDownloads
)

// String is the refusal's metric label.
func (r Refusal) String() string {
	switch r {
	case OverRequests:
		return "requests"
	case OverDownloads:
		return "downloads"
	}
	return "admitted"
}

// Slot is one admitted request's place among its vendor's requests in
// flight: Release gives it back, once. It is a pointer to the vendor's
// counts, typed by what it holds, so that holding one, storing it in an
// interface and giving it back allocate nothing.
type Slot interface{ Release() }

// Counter keeps each vendor's counts. Vendors' entries are kept once made
// (a few dozen bytes each, one per vendor that ever sent a request here), so
// that a request allocates nothing.
type Counter struct {
	mu      sync.RWMutex
	vendors map[string]*Counts
}

// Counts are one vendor's requests and downloads in flight (Counter.For).
type Counts struct {
	requests  atomic.Int32
	downloads atomic.Int32
}

// requestSlot and downloadSlot are a vendor's counts as the Slot of a
// request and of a report download.
type (
	requestSlot  Counts
	downloadSlot Counts
)

func (s *requestSlot) Release() { s.requests.Add(-1) }

func (s *downloadSlot) Release() {
	s.downloads.Add(-1)
	s.requests.Add(-1)
}

// New returns an empty Counter.
func New() *Counter { return &Counter{vendors: make(map[string]*Counts)} }

// Acquire takes a slot for a request of vendor, a report download when
// download is set, within caps; past a cap it takes nothing and says which.
func (c *Counter) Acquire(vendor string, caps Caps, download bool) (Slot, Refusal) {
	return c.For(vendor).Acquire(caps, download)
}

// Acquire is Counter.Acquire for the vendor whose counts v are: a caller
// that keeps them (beside the vendor's cached identity) looks nothing up.
func (v *Counts) Acquire(caps Caps, download bool) (Slot, Refusal) {
	if v.requests.Add(1) > caps.Requests {
		v.requests.Add(-1)
		return nil, OverRequests
	}
	if !download {
		return (*requestSlot)(v), Admitted
	}
	if v.downloads.Add(1) > caps.Downloads {
		v.downloads.Add(-1)
		v.requests.Add(-1)
		return nil, OverDownloads
	}
	return (*downloadSlot)(v), Admitted
}

// InFlight is vendor's requests and downloads in flight now.
func (c *Counter) InFlight(vendor string) (requests, downloads int) {
	c.mu.RLock()
	v := c.vendors[vendor]
	c.mu.RUnlock()
	if v == nil {
		return 0, 0
	}
	return int(v.requests.Load()), int(v.downloads.Load())
}

// Total is every vendor's requests and downloads in flight now (a gauge).
func (c *Counter) Total() (requests, downloads int) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, v := range c.vendors {
		requests += int(v.requests.Load())
		downloads += int(v.downloads.Load())
	}
	return requests, downloads
}

// For is vendor's counts, made on its first request. They are kept once
// made: a caller may keep them as long as it likes.
func (c *Counter) For(vendor string) *Counts {
	c.mu.RLock()
	v := c.vendors[vendor]
	c.mu.RUnlock()
	if v != nil {
		return v
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if v = c.vendors[vendor]; v == nil {
		v = new(Counts)
		c.vendors[vendor] = v
	}
	return v
}
