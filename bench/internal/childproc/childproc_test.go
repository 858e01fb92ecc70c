package childproc

import (
	"net"
	"strings"
	"testing"
	"time"
)

func TestStartWaitStop(t *testing.T) {
	dir := t.TempDir()
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(addr)
	// A real listener: python's http.server is on every machine of this kind.
	p, err := Start(dir, "listener", nil, "python3", "-c",
		"import socket,time;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);s.bind(('127.0.0.1',"+port+"));s.listen();print('listening',flush=True);time.sleep(60)")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WaitTCP(addr, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(p.Tail(), "listening") {
		t.Fatalf("log tail %q lacks the child's output", p.Tail())
	}
	p.Stop(2 * time.Second)
	if !p.Exited() {
		t.Fatal("still running after Stop")
	}
}

func TestWaitTCPFailsWhenChildDies(t *testing.T) {
	p, err := Start(t.TempDir(), "dies", nil, "sh", "-c", "echo bye; exit 3")
	if err != nil {
		t.Fatal(err)
	}
	err = p.WaitTCP("127.0.0.1:1", 10*time.Second)
	if err == nil || !strings.Contains(err.Error(), "exited before listening") || !strings.Contains(err.Error(), "bye") {
		t.Fatalf("err = %v", err)
	}
}
