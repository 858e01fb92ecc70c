package throttle

// tracked counts the in-process windows per address and per key.
func tracked(t *Throttle) (addrs, keys int) {
	l := t.c.(*localCounter)
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.addrs.m), len(l.keys.m)
}
