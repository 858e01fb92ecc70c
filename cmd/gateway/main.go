// Command gateway is vendorgate's edge gateway: it loads its configuration,
// builds the gateway and serves the public and admin listeners. SIGHUP
// reloads the limits, overrides, failed-key thresholds and trusted proxies;
// SIGTERM or SIGINT drains in-flight requests and exits 0.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/redis/go-redis/v9"

	"vendorgate/config"
	"vendorgate/gateway"
	"vendorgate/gateway/auth"
	"vendorgate/gateway/openapi"
	"vendorgate/gateway/throttle"
)

func main() {
	os.Exit(run())
}

func run() int {
	path := flag.String("config", "", "YAML configuration file (optional; GATEWAY_* environment overrides it)")
	check := flag.Bool("check", false, "load and validate the configuration, print it (secrets masked) and exit")
	flag.Parse()

	cfg, err := config.LoadGateway(*path, os.LookupEnv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway: configuration:", err)
		return 2
	}
	if *check {
		if err := config.Print(os.Stdout, cfg); err != nil {
			fmt.Fprintln(os.Stderr, "gateway:", err)
			return 2
		}
		return 0
	}
	log := newLogger(cfg.LogLevel)
	redis.SetLogger(redisLog{log}) // go-redis logs through a package-level logger: route it to JSON
	settings, err := settingsOf(cfg, *path)
	if err != nil {
		log.Error("configuration", "err", err)
		return 2
	}
	g, err := gateway.New(gateway.Options{
		Backends:          cfg.BackendURL,
		InternalToken:     cfg.InternalToken,
		Prefixes:          cfg.KeyPrefixes.APIKey(),
		KeySigningSecrets: cfg.KeySigningSecrets,
		Redis: gateway.RedisOptions{URLs: cfg.Redis.URL, MasterName: cfg.Redis.MasterName, Timeout: cfg.Redis.Timeout,
			PoolSize: cfg.Redis.PoolSize, BreakerOpenFor: cfg.Redis.BreakerOpenFor, BreakerFailures: cfg.Redis.BreakerFailures,
			DisablePipeline: !cfg.Redis.Pipeline},
		KeyCache: auth.CacheOptions{Size: cfg.KeyCache.Size, NegativeSize: cfg.KeyCache.NegativeSize,
			TTL: cfg.KeyCache.TTL, NegativeTTL: cfg.KeyCache.NegativeTTL},
		Proxy: gateway.ProxyOptions{Timeout: cfg.Proxy.Timeout, MaxConns: cfg.Proxy.MaxConns,
			BreakerOpenFor: cfg.Proxy.BreakerOpenFor, BreakerFailures: cfg.Proxy.BreakerFailures,
			StreamIdleTimeout: cfg.Proxy.StreamIdleTimeout},
		MaxBodyBytes:       cfg.MaxBodyBytes,
		FailedKeysTracked:  cfg.FailedKeys.MaxTracked,
		Settings:           settings,
		Logger:             log,
		OpenAPI:            openapi.Document,
		Docs:               gateway.DocsOptions{PublicBaseURL: cfg.PublicBaseURL, Rate: cfg.Docs.Rate, Window: cfg.Docs.Window},
		AdminToken:         cfg.AdminToken,
		UsageFlushInterval: cfg.Usage.FlushInterval,
	})
	if err != nil {
		log.Error("gateway", "err", err)
		return 1
	}
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
	log.Info("gateway listening", "listen", pub.Addr().String(), "admin_listen", adm.Addr().String(),
		"backends", len(cfg.BackendURL), "config_version", settings.Version)

	served := make(chan error, 1)
	go func() { served <- g.Serve(pub, adm) }()

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
	if err == nil {
		var s gateway.Settings
		if s, err = settingsOf(cfg, path); err == nil {
			err = g.Reload(s)
		} else {
			g.ReloadFailed()
		}
		if err == nil {
			log.Info("configuration reloaded", "config_version", s.Version)
			return
		}
	} else {
		g.ReloadFailed()
	}
	log.Error("configuration reload refused; the previous configuration stays", "err", err)
}

// settingsOf is the reloadable part of cfg. Version is a hash of the
// effective settings file, or "defaults" without one.
func settingsOf(cfg *config.Gateway, path string) (gateway.Settings, error) {
	trusted, err := config.ParseCIDRs(cfg.TrustedProxies)
	if err != nil {
		return gateway.Settings{}, fmt.Errorf("trusted_proxies: %w", err)
	}
	s := gateway.Settings{
		Vendor:         pairOf(cfg.Limits.Vendor),
		PerKey:         pairOf(cfg.Limits.PerKey),
		Overrides:      make(map[string]gateway.LimitPair, len(cfg.Limits.Overrides)),
		FailedKeys:     throttle.Thresholds{PerAddress: cfg.FailedKeys.PerAddress, PerKey: cfg.FailedKeys.PerKey, Window: cfg.FailedKeys.Window},
		TrustedProxies: trusted,
		Version:        "defaults",
	}
	for v, p := range cfg.Limits.Overrides {
		s.Overrides[v] = pairOf(p)
	}
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return gateway.Settings{}, errors.New("read config for its version: " + err.Error())
		}
		sum := sha256.Sum256(b)
		s.Version = hex.EncodeToString(sum[:6])
	}
	return s, nil
}

func pairOf(p config.LimitPair) gateway.LimitPair {
	return gateway.LimitPair{Reads: limitOf(p.Reads), Orders: limitOf(p.Orders)}
}

func limitOf(l config.Limit) gateway.Limit {
	g := gateway.Limit{Rate: l.Rate, Period: l.Period, Burst: l.Burst, Shadow: l.Shadow}
	if l.ShadowTwin != nil {
		t := limitOf(*l.ShadowTwin)
		g.Twin = &t
	}
	return g
}

// redisLog turns go-redis's own log lines (dial failures) into slog lines.
type redisLog struct{ log *slog.Logger }

func (r redisLog) Printf(_ context.Context, format string, v ...any) {
	r.log.Warn("redis", "msg", fmt.Sprintf(format, v...))
}

func newLogger(level string) *slog.Logger {
	var lv slog.Level
	_ = lv.UnmarshalText([]byte(level))
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: lv}))
}
