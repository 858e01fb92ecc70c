package concurrency

import (
	"vendorgate/gateway/limit/redisconn"
)

// releaseBatch is the most requests one release or refresh script call
// names, and the most the releaser gives back at once: a call that holds
// Redis for a few hundred microseconds at most.
const releaseBatch = 256

// calls splits the requests a release or a refresh names into script
// calls: in order, up to releaseBatch requests a call; with Redis Cluster,
// the requests of one call share a hash slot (each request's sets do:
// they carry its vendor's hash tag), so that the call's keys are all on
// one node.
type calls struct{ cluster bool }

// call is one script call's keys and arguments, and which of the
// requests given to batches it names: from on, in order (index nil), or
// those of index, in its order (Redis Cluster).
type call struct {
	keys  []string
	args  []any
	from  int
	index []int
}

// place is where the j-th request c names is in the requests given.
func (c *call) place(j int) int {
	if c.index != nil {
		return c.index[j]
	}
	return c.from + j
}

// batches is the script calls for hs (see releaseScript and
// refreshScript: the gateway's id, the TTL for a refresh, then each
// request's number of sets and its number). The arguments point at the
// Helds' numbers, which outlive the calls.
func (c calls) batches(hs []*Held, id *string, refresh bool, ttl *int64) []call {
	head := []any{id}
	if refresh {
		head = append(head, ttl)
	}
	if !c.cluster { // in order, releaseBatch a call
		out := make([]call, 0, (len(hs)+releaseBatch-1)/releaseBatch)
		for from := 0; from < len(hs); from += releaseBatch {
			part := hs[from:min(from+releaseBatch, len(hs))]
			nkeys := 0
			for _, h := range part {
				nkeys += h.n
			}
			b := call{keys: make([]string, 0, nkeys), args: make([]any, 0, len(head)+2*len(part)), from: from}
			b.args = append(b.args, head...)
			for _, h := range part {
				b.add(h)
			}
			out = append(out, b)
		}
		return out
	}
	var out []call
	open := map[uint16]int{} // by hash slot, the call taking requests
	for i, h := range hs {
		slot := redisconn.Slot(h.keys[0])
		j, ok := open[slot]
		if !ok || len(out[j].index) == releaseBatch {
			j = len(out)
			open[slot] = j
			out = append(out, call{args: append([]any(nil), head...)})
		}
		out[j].add(h)
		out[j].index = append(out[j].index, i)
	}
	return out
}

// add names h in c.
func (c *call) add(h *Held) {
	c.keys = append(c.keys, h.keys[:h.n]...)
	c.args = append(c.args, h.n, &h.seq)
}
