package tracing

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Exporter is where spans go, as the start line names it.
type Exporter struct {
	Name     string // otlp (or what OTEL_TRACES_EXPORTER names)
	Protocol string // http/protobuf or grpc (otlp)
	Endpoint string // the traces endpoint, its password hidden
}

// ExporterFromEnv names the exporter, protocol and endpoint the
// environment sets, as autoexport and the OTLP exporters read them: the
// traces endpoint as it is, else the general one (with /v1/traces over
// HTTP), else the OTLP default on localhost.
func ExporterFromEnv(lookup func(string) (string, bool)) Exporter {
	get := func(k string) string { v, _ := lookup(k); return strings.TrimSpace(v) }
	e := Exporter{Name: strings.ToLower(get("OTEL_TRACES_EXPORTER"))}
	if e.Name == "" {
		e.Name = "otlp"
	}
	e.Protocol = strings.ToLower(cmpOr(get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), get("OTEL_EXPORTER_OTLP_PROTOCOL"), "http/protobuf"))
	grpc := e.Protocol == "grpc"
	switch ep := get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); {
	case ep != "":
		e.Endpoint = ep
	case get("OTEL_EXPORTER_OTLP_ENDPOINT") != "" && grpc:
		e.Endpoint = get("OTEL_EXPORTER_OTLP_ENDPOINT")
	case get("OTEL_EXPORTER_OTLP_ENDPOINT") != "":
		e.Endpoint = strings.TrimSuffix(get("OTEL_EXPORTER_OTLP_ENDPOINT"), "/") + "/v1/traces"
	case grpc:
		e.Endpoint = "https://localhost:4317"
	default:
		e.Endpoint = "https://localhost:4318/v1/traces"
	}
	if u, err := url.Parse(e.Endpoint); err == nil && u.User != nil {
		u.User = nil
		e.Endpoint = u.String()
	}
	return e
}

func cmpOr(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// exportError is an export's failure as the batch processor hands it to
// OpenTelemetry's error handler: loggedExporter has told it already.
type exportError struct{ error }

func (e exportError) Unwrap() error { return e.error }

// loggedExporter tells the log when exports begin to fail and when they
// work again, once each, as the gateway tells of its dependencies; a
// collector down does not write a line per batch.
type loggedExporter struct {
	sdktrace.SpanExporter
	log      *slog.Logger
	endpoint string

	mu      sync.Mutex
	failing bool
	failed  int // exports failed since failing
	lost    int // spans in them
}

// ExportSpans is sdktrace.SpanExporter's.
func (e *loggedExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, spans)
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case err != nil && !e.failing:
		e.failing, e.failed, e.lost = true, 1, len(spans)
		e.log.Warn("traces export failing", "endpoint", e.endpoint, "err", err)
	case err != nil:
		e.failed++
		e.lost += len(spans)
	case e.failing:
		e.failing = false
		e.log.Info("traces export recovered", "endpoint", e.endpoint, "failed_exports", e.failed, "spans_lost", e.lost)
	}
	if err != nil {
		return exportError{err}
	}
	return nil
}

// routeErrors sends what OpenTelemetry reports (its error handler, and its
// own logger's lines) to log as JSON lines, not to the standard library's
// log: export failures are told by loggedExporter, once per change. The
// handler and the logger are OpenTelemetry's global ones.
func routeErrors(log *slog.Logger) {
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		if errors.As(err, new(exportError)) {
			return
		}
		log.Warn("opentelemetry", "err", err)
	}))
	otel.SetLogger(logr.FromSlogHandler(log.Handler()))
}
