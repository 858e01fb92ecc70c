// Command gateway is vendorgate's edge gateway: it loads its configuration,
// builds the gateway and serves the public and admin listeners (and the
// plain-HTTP one, http_listen). SIGHUP reloads the TLS certificate files,
// the limits (shadow twins included), overrides, failed-key thresholds and
// trusted proxies, and the documentation rendered from them; SIGTERM or
// SIGINT drains in-flight requests and exits 0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"vendorgate/config"
	"vendorgate/gateway"
	"vendorgate/gateway/admin"
	"vendorgate/gateway/openapi"
	"vendorgate/shared/liblog"
	"vendorgate/shared/tracing"
)

func main() {
	os.Exit(run())
}

func run() int {
	path := flag.String("config", "", "YAML configuration file (optional; GATEWAY_* environment overrides it)")
	check := flag.Bool("check", false, "load and check the configuration as a start does (the policy table compiled included), print it (secrets masked) and exit; 2 when it is refused")
	flag.Parse()

	// A file that does not load or that the gateway would refuse is a
	// configuration error, exit 2, with the same line whether -check or
	// a start found it (a start that refused it later exited 1, and
	// systemd restarted it every two seconds).
	cfg, err := config.LoadGateway(*path, os.LookupEnv)
	if err == nil {
		err = gateway.Check(cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway: configuration:", err)
		return 2
	}
	// Settings that load but are likely a mistake: said, not refused.
	warnings := cfg.Warnings()
	if *check {
		for _, w := range warnings {
			fmt.Fprintln(os.Stderr, "gateway: WARNING:", w)
		}
		// The certificate files too: a key that does not match, or a file
		// that cannot be read, fails here as it would fail the start, and
		// so does a set that no longer covers public_base_url's host.
		tlsWarnings, err := gateway.CheckCertificates(cfg, time.Now())
		if err != nil {
			fmt.Fprintln(os.Stderr, "gateway: configuration:", err)
			return 2
		}
		for _, w := range tlsWarnings {
			fmt.Fprintln(os.Stderr, "gateway: WARNING:", w)
		}
		if err := config.Print(os.Stdout, cfg); err != nil {
			fmt.Fprintln(os.Stderr, "gateway:", err)
			return 2
		}
		return 0
	}
	log := newLogger(cfg.LogLevel)
	liblog.Route(log) // go-redis and the log package log through process-wide loggers: route them to JSON
	for _, w := range warnings {
		log.Warn("configuration: " + w)
	}
	traces, err := tracing.Setup(context.Background(), "vendorgate-gateway", os.LookupEnv, log)
	if err != nil {
		log.Error("tracing", "err", err)
		return 1
	}
	defer flushTraces(traces, log)
	g, err := gateway.New(gateway.Options{Config: cfg, Logger: log, OpenAPI: openapi.Document,
		Tracer: traces.Tracer("vendorgate/gateway")})
	if err != nil {
		log.Error("gateway", "err", err)
		return 1
	}
	otlpMetrics, err := admin.StartOTLPMetrics(context.Background(), "vendorgate-gateway", os.LookupEnv, g.HTTPServerDuration(), log)
	if err != nil {
		log.Error("otlp metrics", "err", err)
		g.Close()
		return 1
	}
	defer flushOTLPMetrics(otlpMetrics, log)
	pub, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		log.Error("listen", "addr", cfg.Listen, "err", err)
		g.Close()
		return 1
	}
	adm, err := net.Listen("tcp", cfg.AdminListen)
	if err != nil {
		log.Error("listen", "addr", cfg.AdminListen, "err", err)
		pub.Close()
		g.Close()
		return 1
	}
	var plain net.Listener
	if cfg.HTTPListen != "" {
		if plain, err = net.Listen("tcp", cfg.HTTPListen); err != nil {
			log.Error("listen", "addr", cfg.HTTPListen, "err", err)
			pub.Close()
			adm.Close()
			g.Close()
			return 1
		}
	}
	log.Info("gateway listening", "listen", pub.Addr().String(), "admin_listen", adm.Addr().String(), "http_listen", addrOf(plain),
		"backends", len(cfg.BackendURL), "config_version", cfg.Version, "tls", g.TLSServed())

	served := make(chan error, 2)
	go func() { served <- g.Serve(pub, adm) }()
	if plain != nil {
		go func() {
			if err := g.ServePlain(plain); err != nil {
				served <- err
			}
		}()
	}

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	for {
		select {
		case err := <-served:
			log.Error("public listener stopped", "err", err)
			g.Close()
			return 1
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				reload(g, *path, log)
				if err := g.ReloadCertificates(); errors.Is(err, gateway.ErrCertificatesUnchanged) {
					log.Info("tls certificate files unchanged") // a refusal or a swap is logged there
				}
				continue
			}
			log.Info("shutting down", "signal", sig.String(), "delay", cfg.ShutdownDelay.String(), "grace", cfg.ShutdownGrace.String())
			err := g.Shutdown(cfg.ShutdownDelay, cfg.ShutdownGrace)
			<-served
			if err != nil {
				log.Error("shutdown", "err", err)
				return 1
			}
			log.Info("stopped")
			return 0
		}
	}
}

// reload re-reads the file; a file that does not load or validate is
// refused with a log line and the old settings stay.
func reload(g *gateway.Gateway, path string, log *slog.Logger) {
	cfg, err := config.LoadGateway(path, os.LookupEnv)
	if err != nil {
		g.ReloadFailed()
	} else if err = g.Reload(cfg); err == nil {
		return // Reload logged what changed
	}
	log.Error("configuration reload refused; the previous configuration stays", "err", err)
}

// addrOf is ln's address, "off" without one.
func addrOf(ln net.Listener) string {
	if ln == nil {
		return "off"
	}
	return ln.Addr().String()
}

// flushOTLPMetrics exports the metrics once more before the process exits.
func flushOTLPMetrics(m *admin.OTLPMetrics, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.Shutdown(ctx); err != nil {
		log.Warn("otlp metrics not flushed", "err", err)
	}
}

// flushTraces exports the spans still buffered before the process exits.
func flushTraces(t *tracing.Tracing, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.Shutdown(ctx); err != nil {
		log.Warn("traces not flushed", "err", err)
	}
}

func newLogger(level string) *slog.Logger {
	var lv slog.Level
	_ = lv.UnmarshalText([]byte(level))
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: lv}))
}
