package barelf_test

import (
	"crypto/tls"
	"net"
	"testing"
	"time"

	"vendorgate/shared/barelf"
	"vendorgate/shared/idleconn"
)

// streamCtx is the part of a handler's context idleconn.Stream uses.
type streamCtx struct{ c net.Conn }

func (s streamCtx) Conn() net.Conn                   { return s.c }
func (s streamCtx) SetWriteDeadline(time.Time) error { return nil }

// Under TLS the bare-LF guard reads the plaintext above the TLS connection,
// which lies above the progress bound on raw bytes (the backend's TLS
// listener): a streamed answer still finds the progress bound through the
// guard and TLS, so that a large report is bounded by progress, not by the
// whole-answer write timeout.
func TestStreamFindsTheProgressBoundThroughTLS(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	raw := idleconn.New(a, idleconn.Options{Idle: time.Minute})
	guarded := barelf.New(tls.Server(raw, &tls.Config{}))
	if !idleconn.Stream(streamCtx{guarded}) {
		t.Fatal("idleconn.Stream did not find the progress bound under barelf and TLS")
	}
	if idleconn.Stream(streamCtx{barelf.New(tls.Server(a, &tls.Config{}))}) {
		t.Fatal("idleconn.Stream found a progress bound where there is none")
	}
}
