package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// rssKiB reads VmRSS of pid from /proc.
func rssKiB(pid int) (int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) == 0 {
				break
			}
			return strconv.Atoi(f[0])
		}
	}
	return 0, errors.New("no VmRSS in /proc status")
}

// clockTicks is USER_HZ, the unit of the CPU times in /proc/PID/stat: 100
// on every Linux architecture Go supports.
const clockTicks = 100

// cpuTime is the user plus system CPU time of pid and every process below
// it (nginx's workers are children of its master), from /proc.
func cpuTime(pid int) (time.Duration, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	type stat struct{ ppid, ticks int64 }
	stats := map[int64]stat{}
	for _, e := range entries {
		n, err := strconv.ParseInt(e.Name(), 10, 64)
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 13 {
			continue
		}
		ppid, _ := strconv.ParseInt(f[1], 10, 64)
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		stats[n] = stat{ppid: ppid, ticks: ut + st}
	}
	if _, ok := stats[int64(pid)]; !ok {
		return 0, fmt.Errorf("process %d not found", pid)
	}
	var total int64
	var walk func(p int64)
	walk = func(p int64) {
		total += stats[p].ticks
		for child, s := range stats {
			if s.ppid == p {
				walk(child)
			}
		}
	}
	walk(int64(pid))
	return time.Duration(total) * time.Second / clockTicks, nil
}

// syscalls is the read and write system calls (syscr plus syscw of
// /proc/PID/io) of pid and every process below it.
func syscalls(pid int) (int64, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	parent := map[int64]int64{}
	for _, e := range entries {
		n, err := strconv.ParseInt(e.Name(), 10, 64)
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		parent[n], _ = strconv.ParseInt(f[1], 10, 64)
	}
	var total int64
	var walk func(p int64) error
	walk = func(p int64) error {
		b, err := os.ReadFile("/proc/" + strconv.FormatInt(p, 10) + "/io")
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if ok && (k == "syscr" || k == "syscw") {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				total += n
			}
		}
		for child, pp := range parent {
			if pp == p {
				if err := walk(child); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(int64(pid)); err != nil {
		return 0, err
	}
	return total, nil
}
