package e2e

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"vendorgate/shared/testredis"
)

// otlpReceiver is an OTLP/HTTP trace receiver (http/protobuf) on loopback:
// an HTTP server that decodes each export request.
type otlpReceiver struct {
	url string
	mu  sync.Mutex
	got []receivedSpan
}

type receivedSpan struct {
	service, name, traceID, spanID, parentID, traceState string
	requestID                                            string // vendorgate.request_id
}

func startOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	return startOTLPReceiverAt(t, "127.0.0.1:0")
}

// startOTLPReceiverAt starts the receiver on addr.
func startOTLPReceiverAt(t *testing.T, addr string) *otlpReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	r := &otlpReceiver{url: "http://" + ln.Addr().String()}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/traces" {
			http.NotFound(w, req)
			return
		}
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		var export collectortrace.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(b, &export)
		}
		if err != nil {
			t.Errorf("OTLP receiver: %v", err)
			http.Error(w, err.Error(), 400)
			return
		}
		r.mu.Lock()
		for _, rs := range export.GetResourceSpans() {
			service := ""
			for _, a := range rs.GetResource().GetAttributes() {
				if a.GetKey() == "service.name" {
					service = a.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					rid := ""
					for _, a := range s.GetAttributes() {
						if a.GetKey() == "vendorgate.request_id" {
							rid = a.GetValue().GetStringValue()
						}
					}
					r.got = append(r.got, receivedSpan{service: service, name: s.GetName(), traceID: hex.EncodeToString(s.GetTraceId()),
						spanID: hex.EncodeToString(s.GetSpanId()), parentID: hex.EncodeToString(s.GetParentSpanId()),
						traceState: s.GetTraceState(), requestID: rid})
				}
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return r
}

// trace waits for the spans of traceID until every name in want is there.
func (r *otlpReceiver) trace(t *testing.T, traceID string, want ...string) []receivedSpan {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		r.mu.Lock()
		var spans []receivedSpan
		names := map[string]bool{}
		for _, s := range r.got {
			if s.traceID == traceID {
				spans = append(spans, s)
				names[s.service+" "+s.name] = true
			}
		}
		r.mu.Unlock()
		missing := 0
		for _, w := range want {
			if !names[w] {
				missing++
			}
		}
		if missing == 0 {
			return spans
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s: want spans %q, have %v", traceID, want, spans)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func find(spans []receivedSpan, service, name string) receivedSpan {
	for _, s := range spans {
		if s.service == service && s.name == name {
			return s
		}
	}
	return receivedSpan{}
}

// TestTracesAcrossGatewayAndBackend: both binaries export OTLP (http/protobuf)
// to a receiver on loopback, configured by the standard OTEL_* variables
// only. A request that carries a traceparent is continued; one that
// carries none starts a trace; either way the gateway's server span, its
// key lookup, limiter and backend call spans, the backend's server span
// (child of the backend call) and its store calls share one trace id, the
// gateway's access log names it, and the latency histogram carries it as
// an exemplar in the OpenMetrics format.
func TestTracesAcrossGatewayAndBackend(t *testing.T) {
	t.Parallel()
	rcv := startOTLPReceiver(t)
	otel := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": rcv.url, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
		"OTEL_BSP_SCHEDULE_DELAY": "100"}
	s := newStack(t, stackOptions{gatewayEnv: otel, backendEnv: otel})
	_, key := s.newVendor("sandbox", "mvr")
	me := s.gwURLs[0] + "/api/vendor/v1/me"

	const caller = "4bf92f3577b34da6a3ce929d0e0e4736"
	if r := s.do("GET", me, key, nil, map[string]string{"traceparent": "00-" + caller + "-00f067aa0ba902b7-01"}); r.status != 200 {
		t.Fatalf("GET /me: %d %s", r.status, r.body)
	}
	spans := rcv.trace(t, caller, "vendorgate-gateway GET /api/vendor/v1/me", "vendorgate-gateway key lookup",
		"vendorgate-gateway rate limiter", "vendorgate-gateway backend call", "vendorgate-backend GET /api/vendor/v1/me",
		"vendorgate-backend store GetVendor")
	server := find(spans, "vendorgate-gateway", "GET /api/vendor/v1/me")
	call := find(spans, "vendorgate-gateway", "backend call")
	backend := find(spans, "vendorgate-backend", "GET /api/vendor/v1/me")
	if server.parentID != "00f067aa0ba902b7" || call.parentID != server.spanID || backend.parentID != call.spanID ||
		find(spans, "vendorgate-backend", "store GetVendor").parentID != backend.spanID {
		t.Fatalf("the spans do not nest caller → gateway → backend call → backend → store: %+v", spans)
	}

	// No traceparent: the gateway starts the trace and the backend joins it.
	r := s.do("POST", s.gwURLs[0]+"/api/vendor/v1/orders", key, orderBody("D1234567", "mvr"),
		map[string]string{"Content-Type": "application/json", "Idempotency-Key": "trace-1", "X-Request-Id": "trace-rid-1"})
	if r.status != 202 {
		t.Fatalf("POST /orders: %d %s", r.status, r.body)
	}
	var traceID string
	deadline := time.Now().Add(10 * time.Second)
	for traceID == "" {
		for _, line := range strings.Split(s.gateways[0].logText(), "\n") {
			if strings.Contains(line, `"request_id":"trace-rid-1"`) && strings.Contains(line, `"msg":"request"`) {
				if i := strings.Index(line, `"trace_id":"`); i >= 0 {
					traceID = line[i+len(`"trace_id":"`):][:32]
				}
			}
		}
		if traceID == "" && time.Now().After(deadline) {
			t.Fatalf("no access log line with request id trace-rid-1 and a trace_id:\n%s", s.gateways[0].logText())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if traceID == caller {
		t.Fatal("a request without traceparent reused another trace")
	}
	rcv.trace(t, traceID, "vendorgate-gateway POST /api/vendor/v1/orders", "vendorgate-gateway backend call",
		"vendorgate-backend POST /api/vendor/v1/orders", "vendorgate-backend store CreateOrder")

	req, _ := http.NewRequest("GET", s.gwAdmin[0]+"/metrics", nil)
	req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(body, []byte(`# {trace_id="`+caller+`"}`)) {
		t.Errorf("no exemplar with trace id %s in the OpenMetrics scrape (Content-Type %s)", caller, resp.Header.Get("Content-Type"))
	}
}

// spans is every span received so far.
func (r *otlpReceiver) spans() []receivedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]receivedSpan(nil), r.got...)
}

// TestCallerDoesNotDecideWhatIsTraced: both binaries sample 1 % by the
// standard variables (parentbased_traceidratio, 0.01). 300 requests whose
// traceparent says sampled, with trace ids a draw on the id would always
// sample, are exported at about 1 % from an untrusted client and all from
// a trusted proxy, each exported span in the caller's trace; a trusted
// proxy's 32-member tracestate of 6.1 KB is exported cut to 512
// characters, an untrusted client's not at all. The counts are read once
// both binaries have flushed their spans on SIGTERM.
func TestCallerDoesNotDecideWhatIsTraced(t *testing.T) {
	t.Parallel()
	members := make([]string, 32)
	for i := range members {
		members[i] = fmt.Sprintf("v%02d=%s", i, strings.Repeat("x", 120+130*(1-i%2))) // values of 250 and 120 characters
	}
	huge := strings.Join(members, ",")
	const n = 300
	for _, c := range []struct {
		name, yaml string
		trusted    bool
	}{
		{"untrusted client", "", false},
		{"trusted proxy", "trusted_proxies: [127.0.0.1]\n", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			rcv := startOTLPReceiver(t)
			otel := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": rcv.url, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
				"OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.01"}
			s := newStack(t, stackOptions{gatewayEnv: otel, backendEnv: otel,
				gatewayYAML: "limits:\n  vendor:\n    reads: {rate: 1000000, period: 1m}\n" + c.yaml})
			_, key := s.newVendor("sandbox", "mvr")
			sent := map[string]string{} // trace id: tracestate sent
			for i := 1; i <= n+5; i++ {
				id := fmt.Sprintf("4bf92f3577b34da6%016x", i)
				ts := "vg=1"
				if i > n {
					ts = huge
				}
				sent[id] = ts
				r := s.do("GET", s.gwURLs[0]+"/api/vendor/v1/me", key, nil,
					map[string]string{"traceparent": "00-" + id + "-00f067aa0ba902b7-01", "tracestate": ts})
				if r.status != 200 {
					t.Fatalf("GET /me: %d %s", r.status, r.body)
				}
			}
			for _, p := range []*proc{s.gateways[0], s.backend} { // each flushes its spans on SIGTERM
				if err := p.stop(t); err != nil {
					t.Fatalf("%s: %v", p.name, err)
				}
			}
			exported := map[string]int{}
			for _, sp := range rcv.spans() {
				ts, ok := sent[sp.traceID]
				if !ok {
					continue
				}
				if sp.name == "GET /api/vendor/v1/me" && sp.service == "vendorgate-gateway" {
					exported[sp.traceID]++
					if sp.parentID != "00f067aa0ba902b7" {
						t.Errorf("the gateway's span of trace %s does not continue the caller's span: %+v", sp.traceID, sp)
					}
				}
				switch {
				case len(sp.traceState) > 512:
					t.Errorf("%s %s exported %d characters of tracestate", sp.service, sp.name, len(sp.traceState))
				case !c.trusted && sp.traceState != "":
					t.Errorf("%s %s exported an untrusted client's tracestate %.40q", sp.service, sp.name, sp.traceState)
				case c.trusted && ts == "vg=1" && sp.traceState != ts:
					t.Errorf("%s %s exported tracestate %q, want the trusted proxy's %q", sp.service, sp.name, sp.traceState, ts)
				case c.trusted && ts == huge && !strings.HasPrefix(sp.traceState, members[1]+","):
					t.Errorf("%s %s exported tracestate %.40q, want its first short members", sp.service, sp.name, sp.traceState)
				}
			}
			t.Logf("%d of %d requests with a sampled traceparent exported", len(exported), n+5)
			if c.trusted && len(exported) != n+5 || !c.trusted && len(exported) > 20 {
				t.Fatalf("%d of %d requests with a sampled traceparent exported at a ratio of 1 %%", len(exported), n+5)
			}
		})
	}
}

// TestTraceOfAKeyLookupWithoutProbes: a request whose key is not cached
// yet makes the gateway call the backend's key lookup; that call's span on
// the backend is in the request's trace, under the gateway's key lookup
// span, and carries the request's id. The readiness probes (the gateway's
// of the backend, once a second), the gateway's usage flushes to the
// backend and /readyz and /healthz on both admin listeners make no span:
// every span exported is the request's.
func TestTraceOfAKeyLookupWithoutProbes(t *testing.T) {
	t.Parallel()
	rcv := startOTLPReceiver(t)
	otel := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": rcv.url, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
		"OTEL_BSP_SCHEDULE_DELAY": "100"}
	s := newStack(t, stackOptions{gatewayEnv: otel, backendEnv: otel})
	_, key := s.newVendor("sandbox", "mvr")

	const caller = "5bf92f3577b34da6a3ce929d0e0e4736"
	if r := s.do("GET", s.gwURLs[0]+"/api/vendor/v1/me", key, nil, map[string]string{
		"traceparent": "00-" + caller + "-00f067aa0ba902b7-01", "X-Request-Id": "miss-rid-1"}); r.status != 200 {
		t.Fatalf("GET /me: %d %s", r.status, r.body)
	}
	const lookupSpan = "GET " + "/internal/v1/keys/{hash}"
	spans := rcv.trace(t, caller, "vendorgate-gateway key lookup", "vendorgate-backend "+lookupSpan)
	lookup, backend := find(spans, "vendorgate-gateway", "key lookup"), find(spans, "vendorgate-backend", lookupSpan)
	if backend.parentID != lookup.spanID || backend.requestID != "miss-rid-1" {
		t.Errorf("the backend's key lookup span: parent %s, request id %q; want the gateway's key lookup span %s and miss-rid-1",
			backend.parentID, backend.requestID, lookup.spanID)
	}

	for _, u := range []string{s.gwAdmin[0], s.adminURL} {
		for _, path := range []string{"/readyz", "/healthz"} {
			resp, err := http.Get(u + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
	}
	// The gateway probes the backend once a second: wait for three probes.
	probes := func() float64 {
		return metric(scrape(t, s.adminURL), "vendorgate_backend_requests_total", `route="/internal/v1/ready"`)
	}
	for deadline := time.Now().Add(15 * time.Second); probes() < 3; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%v readiness probes counted by the backend; waited for 3", probes())
		}
	}
	for _, p := range []*proc{s.gateways[0], s.backend} { // each flushes its spans on SIGTERM
		if err := p.stop(t); err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
	}
	for _, sp := range rcv.spans() {
		if sp.traceID != caller {
			t.Errorf("a span outside the request's trace: %s %s (trace %s, parent %q)", sp.service, sp.name, sp.traceID, sp.parentID)
		}
	}
}

// TestTracesExportFailureLogged: both binaries export to an OTLP endpoint
// where nothing listens, then a receiver starts there. Each says at start
// that tracing is on, with the exporter and endpoint; each logs one JSON
// "traces export failing" line for several failed exports and one "traces
// export recovered" line counting them, and nothing else of the failure:
// every line of both logs is a JSON object (no standard library log line).
func TestTracesExportFailureLogged(t *testing.T) {
	t.Parallel()
	addr := "127.0.0.1:" + strconv.Itoa(testredis.FreePort(t))
	otel := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + addr, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
		"OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_EXPORTER_OTLP_TIMEOUT": "300"}
	s := newStack(t, stackOptions{gatewayEnv: otel, backendEnv: otel})
	_, key := s.newVendor("sandbox", "mvr")
	me := s.gwURLs[0] + "/api/vendor/v1/me"
	procs := []*proc{s.gateways[0], s.backend}
	get := func() {
		if r := s.do("GET", me, key, nil, nil); r.status != 200 {
			t.Fatalf("GET /me: %d %s", r.status, r.body)
		}
	}
	waitLogs := func(msg string) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			seen := 0
			for _, p := range procs {
				if strings.Contains(p.logText(), `"msg":"`+msg+`"`) {
					seen++
				}
			}
			if seen == len(procs) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d logs hold %q", seen, len(procs), msg)
			}
			get()
		}
	}
	get()
	waitLogs("traces export failing")
	for range 3 { // three more batches, each failing on its own
		get()
		time.Sleep(time.Second)
	}
	startOTLPReceiverAt(t, addr)
	waitLogs("traces export recovered")

	for _, p := range procs {
		counts := map[string]int{}
		var start, back map[string]any
		for _, line := range strings.Split(strings.TrimSpace(p.logText()), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Errorf("%s: a log line that is not a JSON object: %s", p.name, line)
				continue
			}
			msg, _ := m["msg"].(string)
			counts[msg]++
			switch msg {
			case "tracing on":
				start = m
			case "traces export recovered":
				back = m
			}
		}
		if counts["traces export failing"] != 1 || counts["traces export recovered"] != 1 {
			t.Errorf("%s: %d traces export failing lines and %d recovered, want one of each", p.name,
				counts["traces export failing"], counts["traces export recovered"])
		}
		if n, _ := back["failed_exports"].(float64); n < 2 {
			t.Errorf("%s: the recovery line counts %v failed exports, want 2 or more: %v", p.name, back["failed_exports"], back)
		}
		if start["exporter"] != "otlp" || start["protocol"] != "http/protobuf" || start["endpoint"] != "http://"+addr+"/v1/traces" {
			t.Errorf("%s: the tracing start line: %v", p.name, start)
		}
	}
}
