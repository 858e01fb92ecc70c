package readiness

import "testing"

func TestChecksRefuseMissingSources(t *testing.T) {
	if _, err := Checks(Sources{Draining: func() bool { return false }}); err == nil {
		t.Error("checks built without the prober, the proxy and the key lookup")
	}
}
