// Package liblog routes the log lines of the libraries the binaries use
// into the binary's own JSON log, so that every line either binary writes
// is one JSON object: go-redis's (a package-level logger) and the standard
// library's log package (net/http's server errors, for one).
package liblog

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Route sends go-redis's and the log package's lines to log. Both are
// process-wide loggers: a binary's main calls it once, with its logger.
// (OpenTelemetry's is set where tracing is set up.)
func Route(log *slog.Logger) {
	redis.SetLogger(Redis{Log: log})
	slog.SetDefault(log) // the log package's default logger writes through log's handler
}

// Redis routes go-redis's own log lines into slog, one "msg" per line
// with the library's text under "detail". Its dial failures, one per
// failed connection attempt and so one per request in an outage, are
// logged at debug level: the outage itself is told once, by the binary's
// own lines ("dependency unavailable", "invalidation not published").
type Redis struct{ Log *slog.Logger }

// Printf is go-redis's logging interface.
func (r Redis) Printf(ctx context.Context, format string, v ...any) {
	level := slog.LevelWarn
	if strings.Contains(format, "failed to dial") {
		level = slog.LevelDebug
	}
	if !r.Log.Enabled(ctx, level) {
		return
	}
	r.Log.Log(ctx, level, "redis client", "detail", strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: "))
}
