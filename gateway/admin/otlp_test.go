package admin

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

func TestOTLPMetricsEnabled(t *testing.T) {
	for _, c := range []struct {
		env  []string
		want bool
	}{
		{nil, false},
		{[]string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"}, true},
		{[]string{"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://127.0.0.1:4318/v1/metrics"}, true},
		{[]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:4318/v1/traces"}, false},
		{[]string{"OTEL_METRICS_EXPORTER", "otlp"}, true},
		{[]string{"OTEL_METRICS_EXPORTER", "none", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"}, false},
	} {
		env := map[string]string{}
		for i := 0; i+1 < len(c.env); i += 2 {
			env[c.env[i]] = c.env[i+1]
		}
		if got := OTLPMetricsEnabled(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); got != c.want {
			t.Errorf("%v: %v, want %v", c.env, got, c.want)
		}
	}
}

// The producer reads the Prometheus histogram as the convention's
// data points: a 5xx with error.type, buckets counted apart with the
// +Inf one last, the status an int.
func TestDurationProducer(t *testing.T) {
	m := NewMetrics([]string{"/api/vendor/v1/me"})
	m.HTTPServerDuration.WithLabelValues("/api/vendor/v1/me", "GET", "503", "503").Observe(0.007)
	m.HTTPServerDuration.WithLabelValues("/api/vendor/v1/me", "GET", "503", "503").Observe(30)
	m.HTTPServerDuration.WithLabelValues("/api/vendor/v1/me", "GET", "200", "").Observe(0.001)
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.HTTPServerDuration)
	sms, err := (&durationProducer{gatherer: reg, start: time.Now()}).Produce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(sms) != 1 || len(sms[0].Metrics) != 1 || sms[0].Metrics[0].Name != "http.server.request.duration" {
		t.Fatalf("produced %+v", sms)
	}
	points := sms[0].Metrics[0].Data.(metricdata.Histogram[float64]).DataPoints
	if len(points) != 2 {
		t.Fatalf("%d points, want 2", len(points))
	}
	for _, p := range points {
		status, _ := p.Attributes.Value("http.response.status_code")
		errType, hasErr := p.Attributes.Value("error.type")
		route, _ := p.Attributes.Value("http.route")
		if status.Type() != attribute.INT64 || route.AsString() != "/api/vendor/v1/me" {
			t.Errorf("attributes %v", p.Attributes.ToSlice())
		}
		if len(p.BucketCounts) != len(OTelDurationBuckets)+1 || len(p.Bounds) != len(OTelDurationBuckets) {
			t.Fatalf("%d bounds, %d counts", len(p.Bounds), len(p.BucketCounts))
		}
		switch status.AsInt64() {
		case 503:
			if !hasErr || errType.AsString() != "503" || p.Count != 2 || p.BucketCounts[1] != 1 || p.BucketCounts[len(OTelDurationBuckets)] != 1 {
				t.Errorf("503: error.type %v %v, count %d, buckets %v", hasErr, errType.AsString(), p.Count, p.BucketCounts)
			}
		case 200:
			if hasErr || p.Count != 1 || p.BucketCounts[0] != 1 {
				t.Errorf("200: error.type %v, count %d, buckets %v", hasErr, p.Count, p.BucketCounts)
			}
		}
	}
}
