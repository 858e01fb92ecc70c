// Package host names the machine a tool's figures were measured on, for
// the head of its report.
package host

import (
	"os"
	"strings"
)

// CPU is the first processor's model name (/proc/cpuinfo), "" when it
// cannot be read.
func CPU() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
		}
	}
	return ""
}

// Kernel is the kernel's release (/proc/sys/kernel/osrelease), "" when
// it cannot be read.
func Kernel() string {
	data, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}
