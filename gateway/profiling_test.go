package gateway

import (
	"bytes"
	"net/http"
	"testing"
)

// The admin listener serves Go's runtime profiles behind the admin token,
// and not at all without one.
func TestProfilesOnTheAdminListener(t *testing.T) {
	const token = "gateway-admin-token-0123456789"
	get := func(base, auth string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest("GET", base+"/debug/pprof/heap", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(res.Body)
		return res.StatusCode, b.Bytes()
	}
	be := newTestBackend(t)
	on := startGateway(t, be, func(o *Options) { o.Config.AdminToken = token })
	if status, _ := get(on.admin, ""); status != 401 {
		t.Errorf("no Authorization: %d, want 401", status)
	}
	if status, _ := get(on.admin, "Bearer wrong"); status != 401 {
		t.Errorf("wrong token: %d, want 401", status)
	}
	if status, body := get(on.admin, "Bearer "+token); status != 200 || !bytes.HasPrefix(body, []byte{0x1f, 0x8b}) {
		t.Errorf("with the token: %d, %d bytes, want a gzip profile", status, len(body))
	}
	off := startGateway(t, be, nil)
	if status, _ := get(off.admin, "Bearer "+token); status != 404 {
		t.Errorf("no admin token configured: %d, want 404", status)
	}
}
