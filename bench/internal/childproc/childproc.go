// Package childproc runs the servers the benchmark tools start (gateways,
// backends, nginx, HAProxy, their own roles; Redis and PostgreSQL come from
// shared/testredis and shared/testpg) as child processes with
// their output in a log file, and stops them however the tool ends.
package childproc

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"vendorgate/shared/testredis"
)

// Proc is one child process.
type Proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

// Start starts bin with args and extra environment, its output going to
// DIR/name.log. The child gets its own process group, so a Ctrl-C in the
// terminal reaches the tool alone, which then stops its children in order;
// Pdeathsig sends SIGTERM should the tool die without cleaning up, so no
// server is left listening after an interrupted run.
func Start(dir, name string, env []string, bin string, args ...string) (*Proc, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM, then SIGKILL after grace. A nil or ended Proc is fine.
func (p *Proc) Stop(grace time.Duration) {
	if p == nil || p.Exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.Kill()
	}
}

// Kill sends SIGKILL and waits for the process to end.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Tail is the end of the process log, for error messages.
func (p *Proc) Tail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return strings.TrimSpace(string(b))
}

// WaitTCP waits until addr accepts a connection, failing early when the
// process dies.
func (p *Proc) WaitTCP(addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if p.Exited() {
			return fmt.Errorf("%s exited before listening on %s: %v\n%s", p.name, addr, p.err, p.Tail())
		}
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%s did not listen on %s within %s\n%s", p.name, addr, timeout, p.Tail())
}

// FreeAddr is 127.0.0.1:port of a free port.
func FreeAddr() (string, error) {
	p, err := testredis.FindPort(65535)
	if err != nil {
		return "", err
	}
	return "127.0.0.1:" + strconv.Itoa(p), nil
}

// Name is the name the process was started under.
func (p *Proc) Name() string { return p.name }
