package main

import (
	"net"
	"sync"
	"sync/atomic"
)

// hole is a user-space TCP proxy in front of Redis that forwards both ways
// until hold, then forwards nothing and keeps every connection open: a
// network that drops everything, as a firewall or a dead route does.
type hole struct {
	ln    net.Listener
	to    string
	held  atomic.Bool
	mu    sync.Mutex
	conns []net.Conn
}

func startHole(to string) (*hole, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	h := &hole{ln: ln, to: to}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go h.serve(c)
		}
	}()
	return h, nil
}

func (h *hole) addr() string { return h.ln.Addr().String() }

// hold stops forwarding; bytes from either side are read and dropped.
func (h *hole) hold() { h.held.Store(true) }

func (h *hole) close() {
	h.ln.Close()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.conns {
		c.Close()
	}
}

func (h *hole) serve(c net.Conn) {
	up, err := net.Dial("tcp", h.to)
	if err != nil {
		c.Close()
		return
	}
	h.mu.Lock()
	h.conns = append(h.conns, c, up)
	h.mu.Unlock()
	go h.pump(up, c)
	h.pump(c, up)
}

func (h *hole) pump(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			dst.Close()
			return
		}
		if !h.held.Load() {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
	}
}
