package respond

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"vendorgate/shared/apierr"
)

// startServer serves the backend's router settings on a real loopback
// listener, with a few routes that answer each way, behind a server that
// refuses bodies over 64 bytes through ServerErrorHandler.
func startServer(t *testing.T, logs *bytes.Buffer) string {
	t.Helper()
	log := slog.New(slog.NewTextHandler(logs, nil))
	r := NewRouter(log)
	r.GET("/thing", func(ctx *fasthttp.RequestCtx) { JSON(ctx, fasthttp.StatusOK, map[string]string{"id": "t1"}) })
	r.POST("/thing", func(ctx *fasthttp.RequestCtx) {
		JSON(ctx, fasthttp.StatusCreated, map[string]int{"n": len(ctx.PostBody())})
	})
	r.GET("/refused", func(ctx *fasthttp.RequestCtx) {
		Error(ctx, log, apierr.New(apierr.IdempotencyConflict, "already done"))
	})
	r.GET("/broken", func(ctx *fasthttp.RequestCtx) {
		Error(ctx, log, errors.New("disk full at /var/lib/secret-path"))
	})
	r.GET("/panics", func(ctx *fasthttp.RequestCtx) {
		ctx.SetBodyString("half an answer")
		panic("nil map")
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: r.Handler, ErrorHandler: ServerErrorHandler, MaxRequestBodySize: 64}
	done := make(chan struct{})
	go func() { _ = srv.Serve(ln); close(done) }()
	t.Cleanup(func() { _ = srv.Shutdown(); <-done })
	return ln.Addr().String()
}

// TestAnswers: every answer, success or refusal, is JSON and no-store;
// refusals are the envelope with the code's status; an unknown error is a
// 500 whose cause is logged and never shown; a panic is a 500 envelope;
// unknown paths are 404 and known paths with another method 405 with an
// Allow that lists no OPTIONS. Each case fails if its answer changes.
func TestAnswers(t *testing.T) {
	var logs bytes.Buffer
	addr := startServer(t, &logs)
	cases := []struct {
		name, method, path, body string
		status                   int
		code                     apierr.Code // "" for a success
		allow                    string
		want                     string // a part of the body
	}{
		{"JSON", "GET", "/thing", "", 200, "", "", `{"id":"t1"}`},
		{"JSON with a status", "POST", "/thing", "abc", 201, "", "", `{"n":3}`},
		{"apierr as itself", "GET", "/refused", "", 409, apierr.IdempotencyConflict, "", "already done"},
		{"unknown error", "GET", "/broken", "", 500, apierr.InternalError, "", "internal error"},
		{"panic", "GET", "/panics", "", 500, apierr.InternalError, "", "internal error"},
		{"unknown path", "GET", "/nothing", "", 404, apierr.NotFound, "", "no such path"},
		{"trailing slash is another path", "GET", "/thing/", "", 404, apierr.NotFound, "", ""},
		{"method not allowed", "DELETE", "/thing", "", 405, apierr.MethodNotAllowed, "GET, POST", "DELETE"},
		{"body over the limit", "POST", "/thing", strings.Repeat("x", 65), 413, apierr.PayloadTooLarge, "", ""},
	}
	c := &http.Client{Timeout: 5 * time.Second}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, "http://"+addr+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status || !strings.Contains(string(b), tc.want) {
				t.Fatalf("%s %s = %d %s; want %d holding %q", tc.method, tc.path, resp.StatusCode, b, tc.status, tc.want)
			}
			if resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("Cache-Control") != "no-store" {
				t.Fatalf("Content-Type %q, Cache-Control %q; want application/json, no-store",
					resp.Header.Get("Content-Type"), resp.Header.Get("Cache-Control"))
			}
			if strings.Contains(string(b), "secret-path") || strings.Contains(string(b), "nil map") {
				t.Fatalf("the body shows a 500's cause: %s", b)
			}
			if tc.code != "" {
				e, ok := apierr.Parse(b)
				if !ok || e.Code != tc.code {
					t.Fatalf("body %s; want the %s envelope", b, tc.code)
				}
			}
			if got := resp.Header.Get("Allow"); got != tc.allow {
				t.Fatalf("Allow %q; want %q", got, tc.allow)
			}
		})
	}
	if out := logs.String(); !strings.Contains(out, "disk full") || !strings.Contains(out, "nil map") {
		t.Fatalf("the 500s' causes were not logged:\n%s", out)
	}
}

// TestMalformedRequestIsTheEnvelope: a request the server cannot read is a
// 400 validation_error envelope, not fasthttp's plain text. It fails
// without ServerErrorHandler.
func TestMalformedRequestIsTheEnvelope(t *testing.T) {
	addr := startServer(t, &bytes.Buffer{})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, "POST /thing HTTP/1.1\r\nHost: b\r\nContent-Length: nope\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(conn)
	head, body, _ := strings.Cut(string(raw), "\r\n\r\n")
	if !strings.HasPrefix(head, "HTTP/1.1 400") {
		t.Fatalf("answer %q; want 400", raw)
	}
	if e, ok := apierr.Parse([]byte(body)); !ok || e.Code != apierr.ValidationError {
		t.Fatalf("body %q; want the validation_error envelope", body)
	}
}

// A request id with an API key's shape never reaches a backend log line.
func TestRequestIDShapedLikeKeyNotLogged(t *testing.T) {
	for id, want := range map[string]string{
		"gw-00000001":                                "gw-00000001",
		"vgsandbx_" + strings.Repeat("A", 43):        "",
		"abcd1234_" + strings.Repeat("-", 32):        "",
		"id:vgsandbx_" + strings.Repeat("A", 43):     "",
		"vgsandbx_" + strings.Repeat("A", 43) + ".1": "",
		strings.Repeat("r", 300):                     strings.Repeat("r", 256) + "...[truncated: 300 bytes]",
	} {
		var ctx fasthttp.RequestCtx
		ctx.Request.Header.Set("X-Request-Id", id)
		if got := RequestID(&ctx); got != want {
			t.Errorf("RequestID(%q) = %q, want %q", id, got, want)
		}
	}
}
