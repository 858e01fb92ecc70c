package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
)

// OTLPMetrics exports OpenTelemetry's http.server.request.duration over
// OTLP, read from the Prometheus histogram http_server_request_duration_seconds
// at each export: the request path records once, in Prometheus, and
// allocates nothing for OTLP. Its zero value is the export off.
type OTLPMetrics struct {
	mp *sdkmetric.MeterProvider
}

// OTLPMetricsEnabled reports whether the environment asks for OTLP
// metrics, as the OpenTelemetry SDKs read it: OTEL_METRICS_EXPORTER=none
// is off, otlp on; unset, on when an OTLP endpoint is set
// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_METRICS_ENDPOINT).
// lookup is os.LookupEnv.
func OTLPMetricsEnabled(lookup func(string) (string, bool)) bool {
	get := func(k string) string { v, _ := lookup(k); return strings.TrimSpace(v) }
	switch strings.ToLower(get("OTEL_METRICS_EXPORTER")) {
	case "none":
		return false
	case "otlp":
		return true
	}
	return get("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") != ""
}

// StartOTLPMetrics starts the export of duration (the Metrics'
// HTTPServerDuration) when the environment asks for it; service is the
// service name unless OTEL_SERVICE_NAME sets another. The exporter reads
// the rest of the standard variables itself: the protocol
// (OTEL_EXPORTER_OTLP_METRICS_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL,
// http/protobuf by default, or grpc), endpoint and headers, and
// OTEL_METRIC_EXPORT_INTERVAL (60 s by default). Off, it returns an
// OTLPMetrics whose Shutdown does nothing.
func StartOTLPMetrics(ctx context.Context, service string, lookup func(string) (string, bool), duration prometheus.Collector, log *slog.Logger) (*OTLPMetrics, error) {
	if duration == nil {
		return nil, errors.New("otlp metrics: no histogram to export")
	}
	if !OTLPMetricsEnabled(lookup) {
		log.Info("otlp metrics off", "why", "no OTLP endpoint set, or OTEL_METRICS_EXPORTER=none")
		return &OTLPMetrics{}, nil
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(duration); err != nil {
		return nil, fmt.Errorf("otlp metrics: %w", err)
	}
	get := func(k string) string { v, _ := lookup(k); return strings.ToLower(strings.TrimSpace(v)) }
	protocol := get("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL")
	if protocol == "" {
		protocol = get("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var exp sdkmetric.Exporter
	var err error
	switch protocol {
	case "", "http/protobuf":
		protocol = "http/protobuf"
		exp, err = otlpmetrichttp.New(ctx)
	case "grpc":
		exp, err = otlpmetricgrpc.New(ctx)
	default:
		return nil, fmt.Errorf("otlp metrics: OTEL_EXPORTER_OTLP_PROTOCOL %q: want http/protobuf or grpc", protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("otlp metrics: exporter: %w", err)
	}
	// Later options win: the environment's service name over the default.
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", service)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("otlp metrics: resource: %w", err)
	}
	p := &durationProducer{gatherer: reg, start: time.Now()}
	reader := sdkmetric.NewPeriodicReader(exp, sdkmetric.WithProducer(p))
	log.Info("otlp metrics on", "metric", "http.server.request.duration", "protocol", protocol)
	return &OTLPMetrics{mp: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithResource(res))}, nil
}

// Shutdown exports once more and stops, within ctx.
func (o *OTLPMetrics) Shutdown(ctx context.Context) error {
	if o == nil || o.mp == nil {
		return nil
	}
	return o.mp.Shutdown(ctx)
}

// durationProducer turns the Prometheus histogram into OpenTelemetry's
// http.server.request.duration at each export.
type durationProducer struct {
	gatherer prometheus.Gatherer
	start    time.Time // the series' start when the histogram has no created time
}

// otelAttribute is the convention's attribute name of each label.
var otelAttribute = map[string]string{
	"http_route":                "http.route",
	"http_request_method":       "http.request.method",
	"http_response_status_code": "http.response.status_code",
	"error_type":                "error.type",
}

// Produce is metric.Producer's.
func (p *durationProducer) Produce(context.Context) ([]metricdata.ScopeMetrics, error) {
	families, err := p.gatherer.Gather()
	if err != nil {
		return nil, fmt.Errorf("otlp metrics: gather: %w", err)
	}
	now := time.Now()
	var points []metricdata.HistogramDataPoint[float64]
	for _, f := range families {
		if f.GetType() != dto.MetricType_HISTOGRAM {
			continue
		}
		for _, m := range f.GetMetric() {
			points = append(points, p.point(m, now))
		}
	}
	if len(points) == 0 {
		return nil, nil
	}
	return []metricdata.ScopeMetrics{{
		Scope: instrumentation.Scope{Name: "vendorgate/gateway"},
		Metrics: []metricdata.Metrics{{
			Name:        "http.server.request.duration",
			Description: "Duration of HTTP server requests.",
			Unit:        "s",
			Data:        metricdata.Histogram[float64]{Temporality: metricdata.CumulativeTemporality, DataPoints: points},
		}},
	}}, nil
}

// point is one Prometheus series as an OpenTelemetry data point: buckets
// counted apart (Prometheus' are cumulative), the +Inf one last, labels
// under the convention's names, the status code an int, an empty label
// left out.
func (p *durationProducer) point(m *dto.Metric, now time.Time) metricdata.HistogramDataPoint[float64] {
	attrs := make([]attribute.KeyValue, 0, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		name, ok := otelAttribute[l.GetName()]
		if !ok || l.GetValue() == "" {
			continue
		}
		if name == "http.response.status_code" {
			if n, err := strconv.Atoi(l.GetValue()); err == nil {
				attrs = append(attrs, attribute.Int(name, n))
				continue
			}
		}
		attrs = append(attrs, attribute.String(name, l.GetValue()))
	}
	h := m.GetHistogram()
	bounds := make([]float64, 0, len(h.GetBucket()))
	counts := make([]uint64, 0, len(h.GetBucket())+1)
	var below uint64
	for _, b := range h.GetBucket() {
		bounds = append(bounds, b.GetUpperBound())
		counts = append(counts, b.GetCumulativeCount()-below)
		below = b.GetCumulativeCount()
	}
	counts = append(counts, h.GetSampleCount()-below)
	start := p.start
	if ct := h.GetCreatedTimestamp(); ct != nil {
		start = ct.AsTime()
	}
	return metricdata.HistogramDataPoint[float64]{
		Attributes: attribute.NewSet(attrs...), StartTime: start, Time: now,
		Count: h.GetSampleCount(), Sum: h.GetSampleSum(), Bounds: bounds, BucketCounts: counts,
	}
}
