package e2e

import (
	"compress/gzip"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	collectormetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/protobuf/proto"
)

// otlpMetricsReceiver is an OTLP/HTTP metrics receiver (http/protobuf) on
// loopback, keeping the last export of each metric name.
type otlpMetricsReceiver struct {
	url     string
	mu      sync.Mutex
	service string
	last    map[string]*metricspb.Metric
	arrived chan struct{} // a value after each export
}

func startOTLPMetricsReceiver(t *testing.T) *otlpMetricsReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &otlpMetricsReceiver{url: "http://" + ln.Addr().String(), last: map[string]*metricspb.Metric{}, arrived: make(chan struct{}, 1)}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/metrics" {
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
		var export collectormetrics.ExportMetricsServiceRequest
		if err == nil {
			err = proto.Unmarshal(b, &export)
		}
		if err != nil {
			t.Errorf("OTLP metrics receiver: %v", err)
			http.Error(w, err.Error(), 400)
			return
		}
		r.mu.Lock()
		for _, rm := range export.GetResourceMetrics() {
			for _, a := range rm.GetResource().GetAttributes() {
				if a.GetKey() == "service.name" {
					r.service = a.GetValue().GetStringValue()
				}
			}
			for _, sm := range rm.GetScopeMetrics() {
				for _, m := range sm.GetMetrics() {
					r.last[m.GetName()] = m
				}
			}
		}
		r.mu.Unlock()
		select {
		case r.arrived <- struct{}{}:
		default:
		}
		out, _ := proto.Marshal(&collectormetrics.ExportMetricsServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return r
}

// docsPoint is the data point of http.server.request.duration for GET
// /docs answered 200, once an export holds one with count at least n.
func (r *otlpMetricsReceiver) docsPoint(t *testing.T, n uint64) (*metricspb.Metric, *metricspb.HistogramDataPoint) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		r.mu.Lock()
		m := r.last["http.server.request.duration"]
		r.mu.Unlock()
		for _, p := range m.GetHistogram().GetDataPoints() {
			attrs := map[string]string{}
			for _, a := range p.GetAttributes() {
				v := a.GetValue().GetStringValue()
				if _, isInt := a.GetValue().GetValue().(*commonpb.AnyValue_IntValue); isInt {
					v = strconv.FormatInt(a.GetValue().GetIntValue(), 10)
				}
				attrs[a.GetKey()] = v
			}
			if attrs["http.route"] == "/docs" && attrs["http.request.method"] == "GET" && attrs["http.response.status_code"] == "200" && p.GetCount() >= n {
				return m, p
			}
		}
		select {
		case <-r.arrived:
		case <-deadline:
			t.Fatalf("no export of http.server.request.duration with GET /docs 200 counted %d times within 30s; last: %v", n, m)
		}
	}
}

// TestOTLPExportsHTTPServerDuration: with an OTLP endpoint set (the
// standard OTEL_* variables, as for traces), the gateway exports
// OpenTelemetry's http.server.request.duration over OTLP beside the
// Prometheus http_server_request_duration_seconds: the same counts, in
// seconds, with the advised buckets and the convention's attribute names
// (http.response.status_code an int). The export is read from a real
// OTLP/HTTP receiver.
func TestOTLPExportsHTTPServerDuration(t *testing.T) {
	t.Parallel()
	rcv := startOTLPMetricsReceiver(t)
	s := newStack(t, stackOptions{gatewayEnv: map[string]string{
		"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": rcv.url + "/v1/metrics",
		"OTEL_METRIC_EXPORT_INTERVAL":         "200", // ms
	}})
	for i := 0; i < 3; i++ {
		resp, err := http.Get(s.gwURLs[0] + "/docs")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET /docs: %d", resp.StatusCode)
		}
	}
	m, p := rcv.docsPoint(t, 3)
	if m.GetUnit() != "s" {
		t.Errorf("unit %q, want s", m.GetUnit())
	}
	if got := m.GetHistogram().GetAggregationTemporality(); got != metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE {
		t.Errorf("temporality %v, want cumulative", got)
	}
	advised := []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}
	if b := p.GetExplicitBounds(); len(b) != len(advised) {
		t.Errorf("bounds %v, want %v", b, advised)
	} else {
		for i := range b {
			if b[i] != advised[i] {
				t.Errorf("bounds %v, want %v", b, advised)
				break
			}
		}
	}
	var sum uint64
	for _, c := range p.GetBucketCounts() {
		sum += c
	}
	if len(p.GetBucketCounts()) != len(advised)+1 || sum != p.GetCount() {
		t.Errorf("bucket counts %v (%d of them, summing to %d), want %d summing to the count %d", p.GetBucketCounts(), len(p.GetBucketCounts()), sum, len(advised)+1, p.GetCount())
	}
	for _, a := range p.GetAttributes() {
		if a.GetKey() == "http.response.status_code" && a.GetValue().GetIntValue() != 200 {
			t.Errorf("http.response.status_code %v, want the int 200", a.GetValue())
		}
		if a.GetKey() == "error.type" {
			t.Errorf("error.type %v on a 200", a.GetValue())
		}
	}
	if p.GetStartTimeUnixNano() == 0 || p.GetStartTimeUnixNano() > p.GetTimeUnixNano() {
		t.Errorf("start %d, time %d", p.GetStartTimeUnixNano(), p.GetTimeUnixNano())
	}
	rcv.mu.Lock()
	service := rcv.service
	rcv.mu.Unlock()
	if service != "vendorgate-gateway" {
		t.Errorf("service.name %q, want vendorgate-gateway", service)
	}
	// The Prometheus histogram counts the same requests.
	prom := regexp.MustCompile(`(?m)^http_server_request_duration_seconds_count\{[^}]*http_request_method="GET"[^}]*http_response_status_code="200"[^}]*http_route="/docs"[^}]*\} (\d+)$`).FindStringSubmatch(scrape(t, s.gwAdmin[0]))
	if prom == nil {
		t.Fatal("no http_server_request_duration_seconds_count for GET /docs 200 on /metrics")
	}
	if n, _ := strconv.ParseUint(prom[1], 10, 64); n < p.GetCount() {
		t.Errorf("Prometheus counts %d, OTLP %d: OTLP's is a later reading or equal", n, p.GetCount())
	}
}
