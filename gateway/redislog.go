package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// RedisLog routes go-redis's own log lines (redis.SetLogger: the library
// logs through one package-level logger) into slog, one "msg" per line
// with the library's text under "detail". Its dial failures, one per
// failed connection attempt and so one per request in an outage, are
// logged at debug level: the outage itself is told once, by the prober's
// "dependency unavailable" and "dependency available again".
type RedisLog struct{ Log *slog.Logger }

// Printf is go-redis's logging interface.
func (r RedisLog) Printf(ctx context.Context, format string, v ...any) {
	level := slog.LevelWarn
	if strings.Contains(format, "failed to dial") {
		level = slog.LevelDebug
	}
	if !r.Log.Enabled(ctx, level) {
		return
	}
	r.Log.Log(ctx, level, "redis client", "detail", strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: "))
}
