package host

import (
	"os"
	"testing"
)

// On Linux both are read; a name with a newline would break a report's
// line.
func TestCPUAndKernel(t *testing.T) {
	if _, err := os.Stat("/proc/cpuinfo"); err != nil {
		t.Skip("no /proc/cpuinfo")
	}
	for name, v := range map[string]string{"CPU": CPU(), "Kernel": Kernel()} {
		if v == "" {
			t.Errorf("%s is empty", name)
		}
		for _, r := range v {
			if r == '\n' {
				t.Errorf("%s %q holds a newline", name, v)
			}
		}
	}
}
