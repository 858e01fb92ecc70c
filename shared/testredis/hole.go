package testredis

import (
	"net"
	"sync"
	"sync/atomic"
)

// Hole is a user-space TCP proxy in front of a Redis (or any TCP server)
// that forwards both ways until Hold, then forwards nothing and keeps every
// connection open: a network that drops everything, as a firewall or a
// dead route does, or a Redis that accepts and never answers.
type Hole struct {
	ln    net.Listener
	to    string
	held  atomic.Bool
	mu    sync.Mutex
	conns []net.Conn
}

// StartHole listens on a free loopback port and forwards each connection
// to the address to.
func StartHole(to string) (*Hole, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	h := &Hole{ln: ln, to: to}
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

// Addr is the address to dial in place of the server's.
func (h *Hole) Addr() string { return h.ln.Addr().String() }

// Hold stops forwarding; bytes from either side are read and dropped.
func (h *Hole) Hold() { h.held.Store(true) }

// Close stops listening and closes every connection, both sides.
func (h *Hole) Close() {
	h.ln.Close()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.conns {
		c.Close()
	}
	h.conns = nil
}

func (h *Hole) serve(c net.Conn) {
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

func (h *Hole) pump(dst, src net.Conn) {
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
