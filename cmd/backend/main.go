// Command backend runs the vendorgate backend: vendors, keys and orders,
// the vendor API for the gateway and the admin API for vendorctl.
//
//	backend -config config/examples/backend.yaml
//	backend -config FILE -check   # validate, print the effective config, exit
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"vendorgate/backend"
	"vendorgate/config"
	"vendorgate/shared/liblog"
	"vendorgate/shared/tracing"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("backend", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "YAML configuration file (every key can be overridden by BACKEND_* variables)")
	check := fs.Bool("check", false, "validate the configuration, print it with secrets masked, and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, err := config.LoadBackend(*path, os.LookupEnv)
	if err == nil {
		// The TLS files too: a key that does not match, or a file that
		// cannot be read, fails -check as it would fail the start.
		_, err = backend.TLSConfig(cfg)
	}
	if err != nil {
		fmt.Fprintf(stderr, "backend: %v\n", err)
		return 2
	}
	if *check {
		if err := config.Print(stdout, cfg); err != nil {
			fmt.Fprintf(stderr, "backend: %v\n", err)
			return 2
		}
		return 0
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level(cfg.LogLevel)}))
	liblog.Route(log) // go-redis and the log package log through process-wide loggers: route them to JSON
	if err := os.MkdirAll(cfg.ReportsDir, 0o755); err != nil {
		log.Error("create reports directory", "error", err)
		return 1
	}
	ctx := context.Background()
	traces, err := tracing.Setup(ctx, "vendorgate-backend", os.LookupEnv, log)
	if err != nil {
		log.Error("tracing", "error", err)
		return 1
	}
	defer flushTraces(traces, log)
	b, err := backend.New(ctx, backend.Options{Config: cfg, Logger: log, Tracer: traces.Tracer("vendorgate/backend")})
	if err != nil {
		log.Error("backend did not start", "error", err)
		return 1
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	if err := b.Start(); err != nil {
		log.Error("backend did not start", "error", err)
		_ = b.Shutdown(ctx)
		return 1
	}
	code := 0
	select {
	case s := <-sig:
		log.Info("shutting down", "signal", s.String(), "grace", cfg.ShutdownGrace.String())
	case err := <-b.Errors():
		log.Error("listener failed", "error", err)
		code = 1
	}
	sctx, cancel := context.WithTimeout(ctx, cfg.ShutdownGrace)
	defer cancel()
	if err := b.Shutdown(sctx); err != nil {
		log.Error("shutdown", "error", err)
		code = 1
	}
	log.Info("backend stopped")
	return code
}

// flushTraces exports the spans still buffered before the process exits.
func flushTraces(t *tracing.Tracing, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.Shutdown(ctx); err != nil {
		log.Warn("traces not flushed", "error", err)
	}
}

func level(s string) slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return slog.LevelInfo
	}
	return l
}
