// Package testpg starts a private PostgreSQL server on a free loopback port
// for tests: initdb into a temporary folder and pg_ctl start, as the
// postgres user when the test runs as root (the server refuses root).
package testpg

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"testing"

	"vendorgate/shared/testredis"
)

// Server is one PostgreSQL server owned by a test.
type Server struct {
	Port int
	dir  string
	bin  string
	run  []string // prefix that runs a command as the server's user
}

// Start starts a server and stops it when the test ends. Where the
// PostgreSQL binaries are missing it skips the test with a one-line reason;
// .ci/run installs them so CI never skips.
func Start(tb testing.TB) *Server {
	tb.Helper()
	bin := findBin()
	if bin == "" {
		tb.Skip("PostgreSQL binaries not found: apt-get install -y postgresql (as .ci/run does)")
	}
	base, err := os.MkdirTemp("", "vendorgate-pg")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(base) })
	s := &Server{Port: testredis.FreePort(tb), dir: filepath.Join(base, "data"), bin: bin}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			tb.Fatalf("running as root needs the postgres user (installed with the postgresql package): %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chmod(base, 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.Chown(base, uid, gid); err != nil {
			tb.Fatal(err)
		}
		s.run = []string{"runuser", "-u", "postgres", "--"}
	}
	if out, err := s.cmd("initdb", "-D", s.dir, "-A", "trust", "-U", "vendorgate", "--no-sync").CombinedOutput(); err != nil {
		tb.Fatalf("initdb: %v\n%s", err, out)
	}
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200", s.Port, s.dir)
	if out, err := s.cmd("pg_ctl", "-D", s.dir, "-o", opts, "-l", filepath.Join(s.dir, "server.log"), "-w", "start").CombinedOutput(); err != nil {
		tb.Fatalf("pg_ctl start: %v\n%s", err, out)
	}
	tb.Cleanup(s.Stop)
	return s
}

// URL is a postgres:// URL of database db (see CreateDB) on the server.
func (s *Server) URL(db string) string {
	return fmt.Sprintf("postgres://vendorgate@127.0.0.1:%d/%s?sslmode=disable", s.Port, db)
}

// CreateDB creates an empty database and returns its URL.
func (s *Server) CreateDB(tb testing.TB, name string) string {
	tb.Helper()
	if out, err := s.cmd("createdb", "-h", "127.0.0.1", "-p", strconv.Itoa(s.Port), "-U", "vendorgate", name).CombinedOutput(); err != nil {
		tb.Fatalf("createdb %s: %v\n%s", name, err, out)
	}
	return s.URL(name)
}

// Stop stops the server immediately.
func (s *Server) Stop() {
	_ = s.cmd("pg_ctl", "-D", s.dir, "-m", "immediate", "-w", "stop").Run()
}

func (s *Server) cmd(name string, args ...string) *exec.Cmd {
	full := append(append([]string{}, s.run...), filepath.Join(s.bin, name))
	full = append(full, args...)
	return exec.Command(full[0], full[1:]...)
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
