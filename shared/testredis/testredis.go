// Package testredis starts a private redis-server on a free loopback port, so
// that tests (and the load tools under bench/) can also stop, pause (SIGSTOP)
// and restart it to test failure. It never touches a Redis on the standard
// port.
//
// Run, RunCluster and RunSentinel are the core and return errors; Start,
// StartCluster and StartSentinel wrap them for tests, failing the test on
// error and stopping the servers when it ends (as Do wraps Command and
// Restart wraps Rerun).
package testredis

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ErrNotInstalled says redis-server or redis-cli is not on PATH.
var ErrNotInstalled = errors.New("redis-server and redis-cli not found: install them (apt-get install -y redis-server redis-tools) or run .ci/run")

// Options says how Run starts a server. The zero value is a plain server
// on a free port in a temporary folder.
type Options struct {
	// Dir is the server's working folder, holding redis.log, made if
	// missing. Empty: a temporary folder that Close removes.
	Dir string
	// Args are extra redis-server arguments, after the port, the loopback
	// bind, no persistence and the folder.
	Args []string
}

// Server is one redis-server process.
type Server struct {
	Port   int
	dir    string
	ownDir bool
	bin    string
	args   []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// Run starts a redis-server on a free loopback port and waits until it
// answers PING. Close stops it.
func Run(o Options) (*Server, error) {
	return run(o, 65535)
}

// run starts a server on a free port at most maxPort.
func run(o Options, maxPort int) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrNotInstalled
	}
	port, err := FindPort(maxPort)
	if err != nil {
		return nil, err
	}
	s := &Server{Port: port, bin: bin}
	if s.dir, s.ownDir, err = workDir(o.Dir, "testredis"); err != nil {
		return nil, err
	}
	s.args = append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--dir", s.dir, "--protected-mode", "no"}, o.Args...)
	if err := s.start(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// workDir is dir, made if missing, or when dir is "" a new temporary
// folder that the caller owns and removes.
func workDir(dir, pattern string) (path string, owned bool, err error) {
	if dir == "" {
		path, err = os.MkdirTemp("", pattern)
		return path, err == nil, err
	}
	return dir, false, os.MkdirAll(dir, 0o755)
}

// Start starts a redis-server on a free port and stops it when the test
// ends. A missing binary fails the test with a one-line instruction.
func Start(tb testing.TB) *Server {
	tb.Helper()
	return startWith(tb)
}

// StartPersistent is Start with every write made durable before it is
// answered (append-only file, fsync always), so that data survives Stop
// (a kill) and Restart, as a production Redis with persistence would.
func StartPersistent(tb testing.TB) *Server {
	tb.Helper()
	return startWith(tb, "--appendonly", "yes", "--appendfsync", "always")
}

func startWith(tb testing.TB, args ...string) *Server {
	tb.Helper()
	s, err := Run(Options{Dir: tb.TempDir(), Args: args})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}

// Addr is host:port of the server.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// URL is the redis:// URL of the server.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Pid is the server's process id, 0 while it is stopped.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// start runs the process and waits for PING, failing early with the end of
// its log when it exits first (a port taken meanwhile, a bad argument). The
// server gets its own process group, so a Ctrl-C in the terminal reaches
// the test or tool alone, and dies with the process that started it.
func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	logPath := filepath.Join(s.dir, "redis.log")
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin, s.args...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); log.Close(); close(done) }()
	s.cmd, s.done = cmd, done
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			s.cmd = nil
			return fmt.Errorf("redis-server on %s exited at start: %s", s.Addr(), tail(logPath))
		default:
		}
		if ping(s.Addr()) == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.kill()
	return fmt.Errorf("redis-server on %s did not answer PING within 10s: %s", s.Addr(), tail(logPath))
}

// Stop kills the server and waits for it to exit. Stopping a stopped
// server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kill()
}

// kill stops the process; s.mu is held.
func (s *Server) kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT) // a paused server cannot die otherwise
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Rerun stops the server if it runs and starts it again on the same port
// with the same folder (a cluster node keeps its nodes.conf).
func (s *Server) Rerun() error {
	s.Stop()
	var err error
	for i := 0; i < 50; i++ { // the port may linger briefly
		if err = s.start(); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

// Restart is Rerun for tests: an error fails the test.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	if err := s.Rerun(); err != nil {
		tb.Fatal(err)
	}
}

// Close stops the server and removes the folder Run made for it.
func (s *Server) Close() {
	s.Stop()
	if s.ownDir {
		_ = os.RemoveAll(s.dir)
	}
}

// Pause sends SIGSTOP: the server keeps its connections but answers nothing,
// like a hung Redis.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume sends SIGCONT after Pause.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// Command sends one command and returns the first line of the answer, or
// a bulk string whole (INFO), for callers that read Redis's own view.
func (s *Server) Command(args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	if err != nil {
		return "", fmt.Errorf("redis %s: %w", s.Addr(), err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", fmt.Errorf("redis %s: %w", s.Addr(), err)
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("redis %s %s: %w", s.Addr(), args[0], err)
	}
	line = strings.TrimRight(line, "\r\n")
	if strings.HasPrefix(line, "$") { // bulk string: read it whole
		n, _ := strconv.Atoi(line[1:])
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", fmt.Errorf("redis %s %s: %w", s.Addr(), args[0], err)
		}
		return string(buf[:n]), nil
	}
	return line, nil
}

// Do is Command for tests: an error fails the test.
func (s *Server) Do(tb testing.TB, args ...string) string {
	tb.Helper()
	out, err := s.Command(args...)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// cli runs redis-cli against the server, for answers Command does not read
// whole (arrays).
func (s *Server) cli(args ...string) (string, error) {
	out, err := exec.Command("redis-cli", append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(s.Port)}, args...)...).Output()
	if err != nil {
		return "", fmt.Errorf("redis-cli %v: %w", args, err)
	}
	return string(out), nil
}

func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("unexpected %q", line)
	}
	return nil
}

// tail is the end of a log file, for error messages.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// handedOut are the ports FindPort returned in this process. A port is a
// resource of the whole host: this one set is the process's part of it.
var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

// FindPort returns a loopback TCP port that was free a moment ago, at most
// max, and never one it returned before in this process: Linux often gives
// a port just closed to the next bind to port 0, and tests pick several
// ports before the processes that bind them start. Below 65535 it also
// checks port+10000, which a Redis Cluster node binds for its cluster bus.
func FindPort(max int) (int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = make(map[int]bool)
	}
	for range 200 {
		l, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if port > max || handedOut.ports[port] {
			continue
		}
		if max < 65535 {
			bus, err := net.Listen("tcp4", "127.0.0.1:"+strconv.Itoa(port+10000))
			if err != nil {
				continue
			}
			bus.Close()
		}
		handedOut.ports[port] = true
		return port, nil
	}
	return 0, fmt.Errorf("no free loopback port at or below %d", max)
}

// FreePort is FindPort(65535) for tests.
func FreePort(tb testing.TB) int {
	tb.Helper()
	p, err := FindPort(65535)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}
