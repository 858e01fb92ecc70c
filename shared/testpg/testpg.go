// Package testpg starts a private PostgreSQL server on a free loopback port
// for tests and the load tools under bench/: initdb into a temporary folder
// and pg_ctl start, as the postgres user when run as root (the server
// refuses root). Durability is off: it serves tests and measures the tiers
// above it, not the disk.
//
// Run is the core and returns errors; Start wraps it for tests.
package testpg

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"vendorgate/shared/testredis"
)

// ErrNotInstalled says the PostgreSQL binaries are missing.
var ErrNotInstalled = errors.New("PostgreSQL binaries not found under /usr/lib/postgresql/*/bin: apt-get install -y postgresql (as .ci/run does)")

// Options says how Run starts a server. The zero value is a server on a
// free port.
type Options struct {
	// Port to listen on; 0 picks a free one.
	Port int
}

// Server is one PostgreSQL server.
type Server struct {
	Port int
	base string // temporary folder holding the data folder
	dir  string // data folder
	bin  string
	run  []string // prefix that runs a command as the server's user
	opts string   // postgres options for pg_ctl -o

	mu      sync.Mutex
	running bool
}

// Run initialises a cluster in a temporary folder and starts the server.
// Close stops it and removes the folder. Without the PostgreSQL binaries
// it returns ErrNotInstalled.
func Run(o Options) (*Server, error) {
	bin := findBin()
	if bin == "" {
		return nil, ErrNotInstalled
	}
	base, err := os.MkdirTemp("", "vendorgate-pg")
	if err != nil {
		return nil, err
	}
	s := &Server{Port: o.Port, base: base, dir: filepath.Join(base, "data"), bin: bin}
	if err := s.init(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Server) init() error {
	if s.Port == 0 {
		p, err := testredis.FindPort(65535)
		if err != nil {
			return err
		}
		s.Port = p
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return fmt.Errorf("running as root needs the postgres user (installed with the postgresql package): %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chmod(s.base, 0o755); err != nil {
			return err
		}
		if err := os.Chown(s.base, uid, gid); err != nil {
			return err
		}
		s.run = []string{"runuser", "-u", "postgres", "--"}
	}
	if out, err := s.cmd("initdb", "-D", s.dir, "-A", "trust", "-U", "vendorgate", "--no-sync").CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w\n%s", err, out)
	}
	s.opts = fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200", s.Port, s.dir)
	return s.start()
}

// Start starts a server and stops it when the test ends. Where the
// PostgreSQL binaries are missing it skips the test with a one-line reason;
// .ci/run installs them so CI never skips.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s, err := Run(Options{})
	if errors.Is(err, ErrNotInstalled) {
		tb.Skip(err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}

// URL is a postgres:// URL of database db (see CreateDB) on the server.
func (s *Server) URL(db string) string {
	return fmt.Sprintf("postgres://vendorgate@127.0.0.1:%d/%s?sslmode=disable", s.Port, db)
}

// CreateDatabase creates an empty database and returns its URL.
func (s *Server) CreateDatabase(name string) (string, error) {
	if out, err := s.cmd("createdb", "-h", "127.0.0.1", "-p", strconv.Itoa(s.Port), "-U", "vendorgate", name).CombinedOutput(); err != nil {
		return "", fmt.Errorf("createdb %s: %w\n%s", name, err, out)
	}
	return s.URL(name), nil
}

// CreateDB is CreateDatabase for tests: an error fails the test.
func (s *Server) CreateDB(tb testing.TB, name string) string {
	tb.Helper()
	url, err := s.CreateDatabase(name)
	if err != nil {
		tb.Fatal(err)
	}
	return url
}

// start runs pg_ctl start and waits until the server accepts connections.
// pg_ctl gets its own process group, which the server inherits, so a
// Ctrl-C in the terminal reaches the test or tool alone.
func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		return nil
	}
	cmd := s.cmd("pg_ctl", "-D", s.dir, "-o", s.opts, "-l", filepath.Join(s.dir, "server.log"), "-w", "start")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl start: %w\n%s", err, out)
	}
	s.running = true
	return nil
}

// Stop stops the server at once (pg_ctl -m immediate: clients are cut
// off, as in a crash) and keeps its data for Restart. Stopping a stopped
// server does nothing.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running {
		return nil
	}
	if out, err := s.cmd("pg_ctl", "-D", s.dir, "-m", "immediate", "-w", "stop").CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl stop: %w\n%s", err, out)
	}
	s.running = false
	return nil
}

// Restart stops the server if it runs and starts it again on the same
// port with the same data.
func (s *Server) Restart() error {
	if err := s.Stop(); err != nil {
		return err
	}
	return s.start()
}

// Close stops the server and removes its folder.
func (s *Server) Close() {
	_ = s.Stop()
	_ = os.RemoveAll(s.base)
}

func (s *Server) cmd(name string, args ...string) *exec.Cmd {
	full := append(append([]string{}, s.run...), filepath.Join(s.bin, name))
	full = append(full, args...)
	return exec.Command(full[0], full[1:]...)
}

// Version is the server's `postgres --version` line.
func (s *Server) Version() string {
	out, err := exec.Command(filepath.Join(s.bin, "postgres"), "--version").Output()
	if err != nil {
		return "unknown"
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}

func findBin() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Strings(dirs)
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "pg_ctl")); err == nil {
			return dirs[i]
		}
	}
	return ""
}
