package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
)

// cpuSets are the CPUs the attacker runs on and those the rest (the
// gateway, the good client, the backend) run on, as taskset lists; both
// empty: nothing is pinned.
type cpuSets struct{ attack, rest string }

// defaultCPUs gives the attacker the last CPU and the rest the others, on a
// machine with two or more; on one, nothing is pinned.
func defaultCPUs() cpuSets {
	n := runtime.NumCPU()
	if n < 2 {
		return cpuSets{}
	}
	rest := "0"
	if n > 2 {
		rest = fmt.Sprintf("0-%d", n-2)
	}
	return cpuSets{attack: strconv.Itoa(n - 1), rest: rest}
}

// command is bin with args run on cpus (through taskset), or as it is when
// cpus is empty. A Go program started on fewer CPUs sets GOMAXPROCS to
// their number.
func command(cpus, bin string, args ...string) (string, []string) {
	if cpus == "" {
		return bin, args
	}
	return "taskset", append([]string{"-c", cpus, bin}, args...)
}

// pinSelf moves every thread of this process to cpus (threads started
// later inherit it from the thread that starts them).
func pinSelf(cpus string) error {
	if cpus == "" {
		return nil
	}
	out, err := exec.Command("taskset", "-a", "-p", "-c", cpus, strconv.Itoa(os.Getpid())).CombinedOutput()
	if err != nil {
		return fmt.Errorf("taskset: %w: %s", err, out)
	}
	return nil
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/PID/stat's times.
const clockTicks = 100

// cpuTime is the user and system CPU time a process has used, in clock
// ticks (/proc/PID/stat fields 14 and 15; 100 a second on Linux).
func cpuTime(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: count from after it.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	u, err := strconv.ParseInt(f[11], 10, 64)
	if err != nil {
		return 0, err
	}
	st, err := strconv.ParseInt(f[12], 10, 64)
	return u + st, err
}
