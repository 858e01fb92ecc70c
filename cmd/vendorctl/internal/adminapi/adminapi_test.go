package adminapi

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"vendorgate/shared/apierr"
)

// TestAnswers runs the client against a real loopback server that answers
// the shapes a backend, or a proxy in front of it, can send.
func TestAnswers(t *testing.T) {
	var gotAuth, gotType, gotBody, gotPath string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth, gotType, gotPath = r.Header.Get("Authorization"), r.Header.Get("Content-Type"), r.URL.EscapedPath()
		b, _ := io.ReadAll(r.Body)
		gotBody = string(b)
		switch r.URL.Path {
		case "/prefix/ok":
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"vendor_id":"v"}`)
		case "/prefix/invalid":
			w.WriteHeader(http.StatusBadRequest)
			w.Write(apierr.New(apierr.ValidationError, "the request is not valid").Body())
		case "/prefix/fields":
			e := apierr.New(apierr.ValidationError, "the request is not valid")
			e.Fields = map[string]string{"environment": "use sandbox or live", "company_name": "required"}
			w.WriteHeader(http.StatusBadRequest)
			w.Write(e.Body())
		case "/prefix/proxy":
			w.WriteHeader(http.StatusBadGateway)
			io.WriteString(w, "<html>\n<body>502 Bad Gateway</body>\n</html>")
		case "/prefix/notjson":
			io.WriteString(w, "hello")
		}
	}))
	defer srv.Close()
	c, err := New(Options{BaseURL: srv.URL + "/prefix/", Token: "admin-token-123"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	raw, err := c.Do(ctx, http.MethodPost, "/ok", map[string]any{"a": 1})
	if err != nil || string(raw) != `{"vendor_id":"v"}` {
		t.Fatalf("ok: %s, %v", raw, err)
	}
	if gotAuth != "Bearer admin-token-123" || gotType != "application/json" || gotBody != `{"a":1}` || gotPath != "/prefix/ok" {
		t.Fatalf("request: auth %q type %q body %q path %q", gotAuth, gotType, gotBody, gotPath)
	}
	if _, err := c.Do(ctx, http.MethodGet, "/ok", nil); err != nil || gotBody != "" || gotType != "" {
		t.Fatalf("GET without body: err %v, body %q, content type %q", err, gotBody, gotType)
	}

	_, err = c.Do(ctx, http.MethodGet, "/invalid", nil)
	var ae *Error
	if !errors.As(err, &ae) || ae.Status != 400 || err.Error() != "validation_error: the request is not valid" {
		t.Fatalf("envelope: %v", err)
	}
	_, err = c.Do(ctx, http.MethodGet, "/fields", nil)
	if err == nil || err.Error() != "validation_error: the request is not valid (company_name: required; environment: use sandbox or live)" {
		t.Fatalf("fields: %v", err)
	}
	_, err = c.Do(ctx, http.MethodGet, "/proxy", nil)
	if err == nil || errors.As(err, &ae) || err.Error() != "GET /proxy: the backend admin API answered 502 Bad Gateway: <html> <body>502 Bad Gateway</body> </html>" {
		t.Fatalf("non-envelope: %v", err)
	}
	if _, err = c.Do(ctx, http.MethodGet, "/notjson", nil); err == nil || !strings.Contains(err.Error(), "not JSON: hello") {
		t.Fatalf("not JSON: %v", err)
	}
	if strings.Contains(err.Error(), "admin-token-123") {
		t.Fatal("token in an error message")
	}
}

func TestUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: connection refused

	c, err := New(Options{BaseURL: "http://" + addr, Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Do(context.Background(), http.MethodGet, "/admin/v1/vendors", nil)
	var ue *UnreachableError
	if !errors.As(err, &ue) {
		t.Fatalf("err %v, want *UnreachableError", err)
	}
	want := "cannot reach the backend admin API at http://" + addr + ": dial tcp " + addr + ": connect: connection refused"
	if err.Error() != want {
		t.Fatalf("got %q\nwant %q", err.Error(), want)
	}

	// A server that accepts and never answers: the timeout ends the call.
	hang, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hang.Close()
	c, _ = New(Options{BaseURL: "http://" + hang.Addr().String(), Token: "t", Timeout: 100 * time.Millisecond})
	_, err = c.Do(context.Background(), http.MethodGet, "/admin/v1/vendors", nil)
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "no answer in time") {
		t.Fatalf("hung server: %v", err)
	}

	// Interrupted by the operator (Ctrl-C cancels the context): said so.
	c, _ = New(Options{BaseURL: "http://" + hang.Addr().String(), Token: "t"})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = c.Do(ctx, http.MethodGet, "/admin/v1/vendors", nil)
	if errors.As(err, &ue) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("cancelled call: %v", err)
	}
}

func TestNewRefuses(t *testing.T) {
	for _, o := range []Options{{BaseURL: "127.0.0.1:8082", Token: "t"}, {BaseURL: "ftp://h", Token: "t"}, {BaseURL: "http://h"}} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
}
