package backend

import (
	"bytes"
	"testing"
)

// The admin listener serves Go's runtime profiles with the admin token
// only.
func TestProfilesOnTheAdminListener(t *testing.T) {
	h := start(t)
	for _, auth := range []string{"", "Bearer wrong", "Bearer " + testInternalToken} {
		r := h.do("GET", h.admin+"/debug/pprof/heap", map[string]string{"Authorization": auth}, "")
		if r.status != 401 {
			t.Errorf("heap profile with Authorization %q: %d %s", auth, r.status, r.body)
		}
	}
	r := h.adminCall("GET", "/debug/pprof/heap", "")
	if r.status != 200 || !bytes.HasPrefix(r.body, []byte{0x1f, 0x8b}) {
		t.Errorf("heap profile with the admin token: %d, %d bytes", r.status, len(r.body))
	}
	if r := h.adminCall("GET", "/debug/pprof/", ""); r.status != 200 || !bytes.Contains(r.body, []byte("goroutine")) {
		t.Errorf("profile index with the admin token: %d %.200s", r.status, r.body)
	}
}
