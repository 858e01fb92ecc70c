package profiling

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

const token = "profiling-test-token-0123"

// serve runs h on a real loopback listener and returns its base URL.
func serve(t *testing.T, h fasthttp.RequestHandler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return "http://" + ln.Addr().String()
}

func get(t *testing.T, url, auth string) (int, []byte) {
	t.Helper()
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(url)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if err := fasthttp.DoTimeout(req, resp, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode(), append([]byte(nil), resp.Body()...)
}

func TestProfilesBehindTheToken(t *testing.T) {
	base := serve(t, Handler(token, "test", "the admin_token"))
	for _, auth := range []string{"", "Bearer wrong", "Bearer " + token + "x", token} {
		// The same code for the same mistake on every admin listener.
		if status, body := get(t, base+"/debug/pprof/heap", auth); status != 401 || !bytes.Contains(body, []byte(`"code":"invalid_api_key"`)) {
			t.Errorf("Authorization %q: %d %s, want 401 invalid_api_key", auth, status, body)
		}
	}
	status, body := get(t, base+"/debug/pprof/", "Bearer "+token)
	if status != 200 || !bytes.Contains(body, []byte("goroutine")) {
		t.Errorf("index with the token: %d %.200s", status, body)
	}
	// A heap profile is gzip-compressed protobuf.
	status, body = get(t, base+"/debug/pprof/heap", "Bearer "+token)
	if status != 200 || !bytes.HasPrefix(body, []byte{0x1f, 0x8b}) {
		t.Errorf("heap with the token: %d, %d bytes starting %x", status, len(body), body[:min(len(body), 4)])
	}
	status, body = get(t, base+"/debug/pprof/profile?seconds=1", "Bearer "+token)
	if status != 200 || !bytes.HasPrefix(body, []byte{0x1f, 0x8b}) {
		t.Errorf("1 s CPU profile with the token: %d, %d bytes", status, len(body))
	}
}

func TestProfilesOffWithoutAToken(t *testing.T) {
	base := serve(t, Handler("", "test", "the admin_token"))
	for _, auth := range []string{"", "Bearer "} {
		if status, body := get(t, base+"/debug/pprof/heap", auth); status != 404 || !bytes.Contains(body, []byte(`"not_found"`)) {
			t.Errorf("no token configured, Authorization %q: %d %s", auth, status, body)
		}
	}
}

func TestHandles(t *testing.T) {
	for path, want := range map[string]bool{"/debug/pprof/": true, "/debug/pprof/heap": true, "/debug/pprof": false, "/metrics": false} {
		if got := Handles([]byte(path)); got != want {
			t.Errorf("Handles(%q) = %v", path, got)
		}
	}
}
