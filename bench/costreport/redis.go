package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"vendorgate/shared/testredis"
)

// startRedis starts a fresh redis-server for one run of a Redis row. With
// cgOut set, the server runs under callgrind, writing cgOut when it
// exits (stopRedis shuts it down so): testredis starts the redis-server it
// finds on PATH, here a script in dir that execs valgrind on the real one.
func startRedis(dir, cgOut string) (*testredis.Server, error) {
	if cgOut == "" {
		return testredis.Run(testredis.Options{})
	}
	real, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, testredis.ErrNotInstalled
	}
	bin := filepath.Join(dir, "redis-callgrind")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return nil, err
	}
	script := fmt.Sprintf("#!/bin/sh\nexec valgrind --tool=callgrind --cache-sim=yes %s --callgrind-out-file=%s %s \"$@\"\n",
		strings.Join(caches, " "), cgOut, real)
	if err := os.WriteFile(filepath.Join(bin, "redis-server"), []byte(script), 0o755); err != nil {
		return nil, err
	}
	path := os.Getenv("PATH")
	if err := os.Setenv("PATH", bin+string(os.PathListSeparator)+path); err != nil {
		return nil, err
	}
	defer os.Setenv("PATH", path)
	return testredis.Run(testredis.Options{Dir: filepath.Join(dir, "redis")})
}

// stopRedis stops rs; one under callgrind is shut down first and waited
// for (a kill would lose its callgrind file).
func stopRedis(rs *testredis.Server, underCallgrind bool) error {
	defer rs.Close()
	if !underCallgrind {
		return nil
	}
	pid := rs.Pid()
	_, _ = rs.Command("SHUTDOWN", "NOSAVE") // answered by the connection closing
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return nil
		}
	}
	return fmt.Errorf("redis-server under callgrind (pid %s) did not exit within 2 minutes of SHUTDOWN", strconv.Itoa(pid))
}
